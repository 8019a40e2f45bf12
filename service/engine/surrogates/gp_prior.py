"""The GP hyperpriors both QGP backends maximise the posterior with (option ``prior="smooth"``).

Its own module, below ``qgp`` (scikit-learn) and ``gp_torch`` (gpytorch), so that neither backend
imports the other for it.
"""

from __future__ import annotations

import math

import numpy as np


def neg_log_prior(theta: np.ndarray) -> tuple[float, np.ndarray]:
    """-log p(theta) and its gradient, ``theta = log [outputscale, lengthscales..., noise]`` (the
    order of scikit-learn's and the torch backend's hyperparameter vectors).

    The hyperpriors Optuna's GPSampler and BoTorch-style GPs use on a standardised target over the
    unit cube (maximum a posteriori instead of maximum likelihood): each lengthscale ``l`` pays
    ``0.1 (l^2 + l^-2)``, which pulls it towards 1 (a function that varies over the whole range)
    unless the data says otherwise; the outputscale has a Gamma(2, 1) prior and the noise variance
    a Gamma(1.1, 30) one (mean 0.037). With few observations, maximum likelihood readily picks a
    tiny lengthscale that explains every point as noise-free and independent, and the acquisition
    then explores as if nothing were known; the prior keeps such fits smooth.
    """
    theta = np.asarray(theta, dtype=float)
    ls = theta[1:-1]
    c, nz = theta[0], theta[-1]
    e2, em2 = np.exp(2.0 * ls), np.exp(-2.0 * ls)
    value = 0.1 * float(np.sum(e2 + em2)) - (c - math.exp(c)) - (0.1 * nz - 30.0 * math.exp(nz))
    grad = np.empty_like(theta)
    grad[1:-1] = 0.2 * (e2 - em2)
    grad[0] = -(1.0 - math.exp(c))
    grad[-1] = -(0.1 - 30.0 * math.exp(nz))
    return value, grad
