"""Launch distgnn jobs: mpirun command lines (Open MPI, MPICH/Hydra) and SLURM scripts."""
from .mpirun import LaunchError, LaunchPlan, plan, run
from .slurm import sbatch_script

__all__ = ["LaunchError", "LaunchPlan", "plan", "run", "sbatch_script"]
