"""Optuna integration, installed as ``calibo.optuna``: :class:`CaliboSampler` and :class:`CaliboStorage`.

Needs Optuna (``pip install "calibo[server,optuna]"``); importing this package imports it.
"""

if __name__ != "calibo.optuna":  # service/optuna/ installs as calibo.optuna only
    raise ImportError(f"calibo's Optuna sampler is the package calibo.optuna, not {__name__!r}")

from ._sampler import CaliboSampler  # noqa: E402
from ._storage import CaliboStorage  # noqa: E402

__all__ = ["CaliboSampler", "CaliboStorage"]
