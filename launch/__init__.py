"""Launch distgnn jobs: mpirun command lines (Open MPI, MPICH/Hydra) and SLURM scripts."""
from launch.mpirun import JobStopped, LaunchError, LaunchPlan, plan, run
from launch.slurm import sbatch_script

__all__ = ["JobStopped", "LaunchError", "LaunchPlan", "plan", "run", "sbatch_script"]
