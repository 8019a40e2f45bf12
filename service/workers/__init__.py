"""Where fits run: the local process pool of ``calibo serve``, or the cluster's job queue
(``CALIBO_WORKER_MODE=queue``) that ``calibo worker`` processes take them from."""

from .fits import Fits
from .jobs import fit_study, init_process
from .pool import FitPool

__all__ = ["FitPool", "Fits", "fit_study", "init_process"]
