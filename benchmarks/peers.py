"""Peer optimizers behind one runner, for side-by-side runs with calibo.

``run_peer(method, task, n_trials, seed) -> PeerResult``. Overhead is the
wall time spent outside the objective (the optimizer's own cost as a user
feels it). Peers are a benchmark extra (``pip install -e .[bench]``), never a
runtime dependency.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict  # noqa: UP035 - ConfOpt's signature check wants typing.Dict

import numpy as np

from benchmarks.tasks import Task


@dataclass
class PeerResult:
    values: list[float] = field(default_factory=list)
    overhead_s: float = 0.0
    wall_s: float = 0.0


class _Timed:
    """Wraps the objective so its time can be subtracted from the wall time."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.values: list[float] = []
        self.seconds = 0.0

    def __call__(self, params: dict[str, Any]) -> float:
        t = time.perf_counter()
        v = float(self.task.objective(params))
        self.seconds += time.perf_counter() - t
        self.values.append(v)
        return v


# -------------------------------------------------------------------- random
def _random(task: Task, n: int, seed: int, f: _Timed) -> None:
    from calibo.engine import SearchSpace

    space = SearchSpace.from_dict(task.space)
    rng = np.random.default_rng(seed)
    for p in space.from_unit(space.sample_uniform(n, rng)):
        f(p)


# --------------------------------------------------------------------- optuna
def _optuna_params(trial, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for name, s in space.items():
        if s["type"] == "float":
            out[name] = trial.suggest_float(name, s["low"], s["high"], log=s.get("log", False))
        elif s["type"] == "int":
            out[name] = trial.suggest_int(name, s["low"], s["high"], log=s.get("log", False))
        else:  # categorical and ordinal (Optuna has no ordinal type)
            out[name] = trial.suggest_categorical(name, s["choices"])
    return out


def _optuna(sampler_name: str, task: Task, n: int, seed: int, f: _Timed) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if sampler_name == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed)
    else:
        sampler = optuna.samplers.GPSampler(seed=seed)
    study = optuna.create_study(direction=task.direction, sampler=sampler)
    for _ in range(n):
        trial = study.ask()
        study.tell(trial, f(_optuna_params(trial, task.space)))


def _optuna_sampler(name: str, seed: int):
    """The samplers compared through ``study.optimize``: calibo's Optuna sampler and Optuna's own."""
    import optuna

    if name == "calibo":
        from calibo.optuna import CaliboSampler

        return CaliboSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed) if name == "tpe" else optuna.samplers.GPSampler(seed=seed)


def _optuna_optimize(sampler_name: str, task: Task, n: int, seed: int, f: _Timed) -> None:
    """A user's Optuna loop: ``study.optimize`` with the sampler (``optuna.calibo``, ``.gp``, ``.tpe``)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction=task.direction, sampler=_optuna_sampler(sampler_name, seed))
    study.optimize(lambda trial: f(_optuna_params(trial, task.space)), n_trials=n)


# ------------------------------------------------------------- categoricals
def _choice_codes(task: Task, native: tuple[type, ...] = ()) -> dict[str, dict[Any, Any]]:
    """Per categorical parameter, ``{code: choice}`` in the choices' order: a choice whose type a
    peer holds (``native``) is its own code, any other (None, say) goes in as its ``str``."""
    return {name: {(c if isinstance(c, native) else str(c)): c for c in s["choices"]}
            for name, s in task.space.items() if "choices" in s}


def _decode(codes: dict[str, dict[Any, Any]], config: dict[str, Any]) -> dict[str, Any]:
    """A peer's configuration with its categorical codes mapped back to the task's choices."""
    return {k: (codes[k][v] if k in codes else v) for k, v in config.items()}


# -------------------------------------------------------------------- confopt
def _confopt(task: Task, n: int, seed: int, f: _Timed) -> None:
    from confopt.tuning import ConformalTuner
    from confopt.wrapping import CategoricalRange, FloatRange, IntRange

    codes = _choice_codes(task, (str, int, float, bool))  # what ConfOpt's CategoricalRange holds
    space = {}
    for name, s in task.space.items():
        if s["type"] == "float":
            space[name] = FloatRange(min_value=s["low"], max_value=s["high"], log_scale=s.get("log", False))
        elif s["type"] == "int":
            space[name] = IntRange(min_value=s["low"], max_value=s["high"], log_scale=s.get("log", False))
        else:
            space[name] = CategoricalRange(choices=list(codes[name]))

    def objective(configuration: Dict) -> float:  # noqa: UP006
        return f(_decode(codes, dict(configuration)))

    tuner = ConformalTuner(objective, space, minimize=task.direction == "minimize")
    tuner.tune(max_searches=n, n_random_searches=15, random_state=seed, verbose=False)


# ----------------------------------------------------------------------- smac
def _smac(task: Task, n: int, seed: int, f: _Timed) -> None:
    from ConfigSpace import Categorical, ConfigurationSpace, Float, Integer
    from smac import HyperparameterOptimizationFacade, Scenario

    codes = _choice_codes(task)  # ConfigSpace's categoricals: strings
    cs = ConfigurationSpace(seed=seed)
    for name, s in task.space.items():
        if s["type"] == "float":
            cs.add(Float(name, (s["low"], s["high"]), log=s.get("log", False)))
        elif s["type"] == "int":
            cs.add(Integer(name, (s["low"], s["high"]), log=s.get("log", False)))
        else:
            cs.add(Categorical(name, list(codes[name])))

    def train(config, seed: int = 0) -> float:
        v = f(_decode(codes, dict(config)))
        return v if task.direction == "minimize" else -v

    scenario = Scenario(cs, deterministic=True, n_trials=n, seed=seed, output_directory=f"/tmp/smac-{seed}")
    smac = HyperparameterOptimizationFacade(scenario, train, overwrite=True, logging_level=40)
    smac.optimize()


def run_peer(method: str, task: Task, n_trials: int, seed: int) -> PeerResult:
    logging.getLogger().setLevel(logging.WARNING)
    f = _Timed(task)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "random":
            _random(task, n_trials, seed, f)
        elif method == "optuna_tpe":
            _optuna("tpe", task, n_trials, seed, f)
        elif method == "optuna_gp":
            _optuna("gp", task, n_trials, seed, f)
        elif method.startswith("optuna."):  # through study.optimize: optuna.calibo, optuna.gp, optuna.tpe
            _optuna_optimize(method.split(".", 1)[1], task, n_trials, seed, f)
        elif method == "confopt":
            _confopt(task, n_trials, seed, f)
        elif method == "smac":
            _smac(task, n_trials, seed, f)
        else:
            raise ValueError(f"unknown peer {method!r}")
    wall = time.perf_counter() - t0
    return PeerResult(f.values[:n_trials], wall - f.seconds, wall)
