"""Where fits run: the local process pool of ``calibo serve``."""

from .jobs import fit_study, init_process
from .pool import FitPool

__all__ = ["FitPool", "fit_study", "init_process"]
