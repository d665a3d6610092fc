"""Launch distgnn jobs: mpirun command lines (Open MPI, MPICH/Hydra) and SLURM scripts."""
from .mpirun import JobStopped, LaunchError, LaunchPlan, plan, run
from .slurm import sbatch_script

__all__ = ["JobStopped", "LaunchError", "LaunchPlan", "plan", "run", "sbatch_script"]
