"""Launch distgnn jobs: mpirun command lines (Open MPI, MPICH/Hydra) and SLURM scripts."""
from launch.job import JobStopped, run
from launch.mpirun import LaunchError, LaunchPlan, plan
from launch.slurm import sbatch_script

__all__ = ["JobStopped", "LaunchError", "LaunchPlan", "plan", "run", "sbatch_script"]
