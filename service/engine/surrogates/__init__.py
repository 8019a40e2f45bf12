"""Quantile surrogates behind one protocol (see ``base.QuantileSurrogate``)."""

from __future__ import annotations

from .base import SURROGATES, BaseSurrogate, QuantileSurrogate, make_surrogate
from .gp_recal import GPRecal
from .lw import LWGBM, LWKNN, LWRF
from .mlp import MLPEnsemble, MLPQuantile
from .qe import QE
from .qgbm import QGBM
from .qgp import QGP
from .ql import QL
from .qrf import QRF

SURROGATES.update({
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
})


__all__ = ["SURROGATES", "BaseSurrogate", "QuantileSurrogate", "make_surrogate", "GPRecal", "LWGBM", "LWKNN",
           "LWRF", "MLPEnsemble", "MLPQuantile", "QE", "QGBM", "QGP", "QL", "QRF"]
