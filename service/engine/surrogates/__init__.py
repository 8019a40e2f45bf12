"""Quantile surrogates behind one protocol (see ``base.QuantileSurrogate``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import BaseSurrogate, QuantileSurrogate
from .gp_recal import GPRecal
from .lw import LWGBM, LWKNN, LWRF
from .mlp import MLPEnsemble, MLPQuantile
from .qe import QE
from .qgbm import QGBM
from .qgp import QGP
from .ql import QL
from .qrf import QRF

SURROGATES: dict[str, type[BaseSurrogate]] = {
    "qgbm": QGBM,
    "qrf": QRF,
    "ql": QL,
    "qgp": QGP,
    "qe": QE,
    "lw-gbm": LWGBM,
    "lw-knn": LWKNN,
    "lw-rf": LWRF,
    "gp-recal": GPRecal,
    "mlp-ensemble": MLPEnsemble,
    "mlp-quantile": MLPQuantile,
}


def make_surrogate(name: str, levels: Sequence[float], seed: int = 0, device: str = "cpu",
                   **options: Any) -> BaseSurrogate:
    """An unfitted surrogate; torch families train on ``device`` ("cpu" or "cuda")."""
    try:
        cls = SURROGATES[name]
    except KeyError:
        raise ValueError(f"unknown surrogate {name!r}; choose from {sorted(SURROGATES)}") from None
    return cls(levels, seed, device=device, **options)


__all__ = ["SURROGATES", "BaseSurrogate", "QuantileSurrogate", "make_surrogate", "GPRecal", "LWGBM", "LWKNN",
           "LWRF", "MLPEnsemble", "MLPQuantile", "QE", "QGBM", "QGP", "QL", "QRF"]
