"""The papers' synthetic test functions, each minimised (Surjanovic & Bingham's definitions).

Registered as tasks, with their spaces and optima, by :mod:`benchmarks.harness.tasks`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def branin(p: dict[str, Any]) -> float:
    x1, x2 = p["x1"], p["x2"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


_H6_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                  [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
_H6_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                         [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
_H6_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann6(p: dict[str, Any]) -> float:
    x = np.array([p[f"x{i}"] for i in range(6)])
    return float(-np.sum(_H6_ALPHA * np.exp(-np.sum(_H6_A * (x - _H6_P) ** 2, axis=1))))


def ackley5(p: dict[str, Any]) -> float:
    x = np.array([p[f"x{i}"] for i in range(5)])
    d = x.size
    return float(-20 * np.exp(-0.2 * np.sqrt(np.sum(x**2) / d)) - np.exp(np.sum(np.cos(2 * np.pi * x)) / d)
                 + 20 + math.e)


def mixed(p: dict[str, Any]) -> float:
    """A mixed categorical + numeric surface.

    ``optimizer`` (3 choices) shifts and rescales a Branin-like valley in
    (log10 lr, width); ``activation`` (4 choices) adds an offset that interacts
    with ``depth`` (an int) - the best depth differs per activation; ``dropout``
    (a float) adds a quadratic whose centre depends on the optimizer. The
    minimum is 0 at optimizer=adam, activation=gelu, depth=6, dropout=0.2,
    lr=1e-3 and width=0.5.
    """
    opt_shift = {"sgd": (0.8, 1.6, 0.35), "adam": (0.0, 1.0, 0.2), "rmsprop": (0.4, 1.3, 0.1)}
    act = {"relu": (0.3, 4), "gelu": (0.0, 6), "tanh": (0.6, 3), "sigmoid": (1.2, 2)}
    s, scale, drop_c = opt_shift[p["optimizer"]]
    off, best_depth = act[p["activation"]]
    u = math.log10(p["lr"]) + 3.0  # 0 at lr = 1e-3
    v = p["width"] - 0.5
    valley = scale * ((u - 0.8 * v) ** 2 + 2.0 * v**2 + 0.3 * (1 - math.cos(3 * u)))
    return valley + s + off + 0.08 * (p["depth"] - best_depth) ** 2 + 4.0 * (p["dropout"] - drop_c) ** 2


# Calibrated BO (paper 004), Table 1: Forrester 1-D, Ackley 2-D, Alpine-1 10-D (Surjanovic & Bingham).
def forrester(p: dict[str, Any]) -> float:
    """(6x - 2)^2 sin(12x - 4) on [0, 1]; global minimum -6.02074 at x = 0.75725."""
    x = p["x"]
    return (6 * x - 2) ** 2 * math.sin(12 * x - 4)


def ackley2(p: dict[str, Any]) -> float:
    """Ackley (a=20, b=0.2, c=2 pi) in 2-D on [-32.768, 32.768]^2; minimum 0 at the origin."""
    x = np.array([p["x0"], p["x1"]])
    return float(-20 * np.exp(-0.2 * np.sqrt(np.mean(x**2))) - np.exp(np.mean(np.cos(2 * np.pi * x)))
                 + 20 + math.e)


def alpine10(p: dict[str, Any]) -> float:
    """Alpine-1, sum_i |x_i sin(x_i) + 0.1 x_i|, in 10-D on [-10, 10]^10; minimum 0 at the origin."""
    x = np.array([p[f"x{i}"] for i in range(10)])
    return float(np.sum(np.abs(x * np.sin(x) + 0.1 * x)))


def camel6(p: dict[str, Any]) -> float:
    """Six-hump camel on [-3, 3] x [-2, 2]: six local minima, two global ones of -1.031628 at +-(0.0898, -0.7126)."""
    x1, x2 = p["x1"], p["x2"]
    return (4 - 2.1 * x1**2 + x1**4 / 3) * x1**2 + x1 * x2 + (-4 + 4 * x2**2) * x2**2


def levy4(p: dict[str, Any]) -> float:
    """Levy in 4-D on [-10, 10]^4 (Surjanovic & Bingham): many local minima; minimum 0 at (1, 1, 1, 1)."""
    w = 1 + (np.array([p[f"x{i}"] for i in range(4)]) - 1) / 4
    inner = np.sum((w[:-1] - 1) ** 2 * (1 + 10 * np.sin(np.pi * w[:-1] + 1) ** 2))
    return float(np.sin(np.pi * w[0]) ** 2 + inner + (w[-1] - 1) ** 2 * (1 + np.sin(2 * np.pi * w[-1]) ** 2))
