"""Peer optimizers behind one protocol, for side-by-side runs with calibo.

A peer is made by name for a space, its directions and a seed (:func:`make`), then driven by
ask / tell, whatever the number of trials in flight::

    peer = make("optuna_tpe", task.space, [task.direction], seed, trials)
    for handle, params in peer.ask(1): ...
    peer.tell(handle, value)          # a float, or a list with several objectives
    peer.extra()                      # what a run records besides its values

Names:

* ``calibo``: the in-process engine (``calibo.engine.Optimizer``) with its defaults;
  ``calibo:key=value[,key=value]``: EngineConfig overrides (values parsed as JSON when they parse);
  ``calibo-<surrogate>-<acquisition>``: a surrogate x acquisition variant;
* ``optuna_gp`` (GPSampler, which conditions on running trials), ``optuna_tpe`` (TPESampler, with
  ``constant_liar`` unless told otherwise), ``optuna_nsga2`` (several objectives), ``random``
  (uniform over the space, the same sequence for a seed everywhere), ``smac`` (SMAC3's HPO facade
  by ask/tell);
* loop-only peers, which have no ask/tell or whose own loop is what is measured, run by
  :func:`run_loop` one trial at a time: ``confopt`` (ConfOpt's ``tune``) and ``optuna.calibo`` /
  ``optuna.gp`` / ``optuna.tpe`` (a user's ``study.optimize`` with calibo's Optuna sampler or
  Optuna's own).

Peers are a benchmark extra (``pip install -e .[bench]``), never a runtime dependency; each imports
its library when made.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Callable
from typing import Any, Dict, Protocol  # noqa: UP035 - ConfOpt's signature check wants typing.Dict

import numpy as np

Space = dict[str, dict[str, Any]]
ASK_TELL = ("optuna_gp", "optuna_tpe", "optuna_nsga2", "random", "smac")
LOOP_ONLY = ("confopt", "optuna.calibo", "optuna.gp", "optuna.tpe")


class Peer(Protocol):
    def ask(self, n: int = 1) -> list[tuple[Any, dict[str, Any]]]:
        """``n`` new trials: (the handle ``tell`` takes, the parameters)."""

    def tell(self, handle: Any, value: float | list[float]) -> None: ...

    def extra(self) -> dict[str, Any]: ...


# ------------------------------------------------------------------ names
def is_calibo(method: str) -> bool:
    return method == "calibo" or method.startswith(("calibo:", "calibo-"))


def calibo_overrides(method: str) -> dict[str, Any]:
    """``calibo`` -> {}; ``calibo:n_warmup=10,adapter=dtaci`` -> {"n_warmup": 10, "adapter": "dtaci"};
    ``calibo-qgp-ei`` -> {"surrogate": "qgp", "acquisition": "ei"}."""
    if method.startswith("calibo-"):
        _, sur, acq = method.split("-")
        return {"surrogate": sur, "acquisition": acq}
    _, _, spec = method.partition(":")
    out = {}
    for item in filter(None, spec.split(",")):
        key, _, raw = item.partition("=")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def parse_methods(text: str) -> list[str]:
    """Comma list of methods; a ``key=value`` item without a method name continues the variant before it
    (a value may hold a colon: ``calibo:adapter=aci,surrogate_options={"scores":"normalized"}``)."""
    out: list[str] = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        if "=" in item and ":" not in item.partition("=")[0] and out:
            out[-1] += "," + item
        else:
            out.append(item)
    return out


def check_methods(methods: list[str], allowed: tuple[str, ...] = ASK_TELL + LOOP_ONLY) -> None:
    """Fail before any run starts: unknown methods, and EngineConfig overrides the engine refuses."""
    from calibo.engine import EngineConfig
    from calibo.engine.errors import ConfigError

    for m in methods:
        if not is_calibo(m) and m not in allowed:
            raise SystemExit(f"unknown method {m!r}: use {', '.join(allowed)} or calibo:key=value[,key=value]")
        try:
            EngineConfig.from_dict(calibo_overrides(m) if is_calibo(m) else {})
        except ConfigError as e:
            raise SystemExit(f"{m}: {e}") from None


# ------------------------------------------------------------------ parameters
def optuna_params(trial: Any, space: Space) -> dict[str, Any]:
    """The parameters of ``space`` suggested on an Optuna trial (define-by-run)."""
    out = {}
    for name, s in space.items():
        if s["type"] == "float":
            out[name] = trial.suggest_float(name, s["low"], s["high"], log=s.get("log", False))
        elif s["type"] == "int":
            out[name] = trial.suggest_int(name, s["low"], s["high"], log=s.get("log", False))
        else:  # categorical and ordinal (Optuna has no ordinal type)
            out[name] = trial.suggest_categorical(name, s["choices"])
    return out


def random_configs(space: Space, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` uniform configurations of ``space``: random search's sequence for ``seed``."""
    from calibo.engine import SearchSpace

    s = SearchSpace.from_dict(space)
    return s.from_unit(s.sample_uniform(n, np.random.default_rng(seed)))


def _choice_codes(space: Space, native: tuple[type, ...] = ()) -> dict[str, dict[Any, Any]]:
    """Per categorical parameter, ``{code: choice}`` in the choices' order: a choice whose type a
    peer holds (``native``) is its own code, any other (None, say) goes in as its ``str``."""
    return {name: {(c if isinstance(c, native) else str(c)): c for c in s["choices"]}
            for name, s in space.items() if "choices" in s}


def _plain(v: Any) -> Any:
    return int(v) if isinstance(v, np.integer) else float(v) if isinstance(v, np.floating) else v


# ------------------------------------------------------------------ ask / tell peers
class CaliboPeer:
    """The in-process engine; ``tell`` matches the pending trial (and its prediction) by params."""

    def __init__(self, space: Space, directions: list[str], seed: int, config: dict[str, Any]) -> None:
        from calibo.engine import Optimizer

        direction = {"direction": directions[0]} if len(directions) == 1 else {"directions": directions}
        self.opt = Optimizer(space, seed=seed, config=config or None, **direction)

    def ask(self, n: int = 1) -> list[tuple[Any, dict[str, Any]]]:
        return [(s.params, s.params) for s in self.opt.ask(n)]

    def tell(self, handle: Any, value: float | list[float]) -> None:
        self.opt.tell(handle, value)

    def extra(self) -> dict[str, Any]:
        return {}


class OptunaPeer:
    def __init__(self, space: Space, directions: list[str], seed: int, sampler: str,
                 constant_liar: bool = True) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        smp = {"tpe": lambda: optuna.samplers.TPESampler(seed=seed, constant_liar=constant_liar),
               "gp": lambda: optuna.samplers.GPSampler(seed=seed),
               "nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed)}[sampler]()
        self.space = space
        self.study = optuna.create_study(directions=directions, sampler=smp)

    def ask(self, n: int = 1) -> list[tuple[Any, dict[str, Any]]]:
        out = []
        for _ in range(n):
            trial = self.study.ask()
            out.append((trial, optuna_params(trial, self.space)))
        return out

    def tell(self, handle: Any, value: float | list[float]) -> None:
        self.study.tell(handle, value)

    def extra(self) -> dict[str, Any]:
        return {}


class RandomPeer:
    def __init__(self, space: Space, seed: int, trials: int) -> None:
        self._it = iter(random_configs(space, trials, seed))

    def ask(self, n: int = 1) -> list[tuple[Any, dict[str, Any]]]:
        return [(None, next(self._it)) for _ in range(n)]

    def tell(self, handle: Any, value: float | list[float]) -> None:
        pass

    def extra(self) -> dict[str, Any]:
        return {}


class SmacPeer:
    """SMAC3's HPO facade driven by ask/tell (its trials may be asked before earlier ones are told)."""

    def __init__(self, space: Space, directions: list[str], seed: int, trials: int) -> None:
        import tempfile
        from pathlib import Path

        from ConfigSpace import Categorical, ConfigurationSpace, Float, Integer
        from smac import HyperparameterOptimizationFacade, Scenario

        logging.getLogger("smac").setLevel(logging.ERROR)
        cs = ConfigurationSpace(seed=seed)
        for name, spec in space.items():
            if spec["type"] == "float":
                cs.add(Float(name, (spec["low"], spec["high"]), log=spec.get("log", False)))
            elif spec["type"] == "int":
                cs.add(Integer(name, (spec["low"], spec["high"]), log=spec.get("log", False)))
            else:
                cs.add(Categorical(name, [str(c) for c in spec["choices"]]))
        self._back = _choice_codes(space)
        self._sign = 1.0 if directions[0] == "minimize" else -1.0
        scenario = Scenario(cs, deterministic=True, n_trials=trials, seed=seed,
                            output_directory=Path(tempfile.mkdtemp(prefix="smac-")))
        self.smac = HyperparameterOptimizationFacade(scenario, lambda config, seed=0: 0.0, overwrite=True,
                                                     logging_level=40)

    def ask(self, n: int = 1) -> list[tuple[Any, dict[str, Any]]]:
        out = []
        for _ in range(n):
            info = self.smac.ask()
            params = {k: _plain(self._back[k][v] if k in self._back else v) for k, v in dict(info.config).items()}
            out.append((info, params))
        return out

    def tell(self, handle: Any, value: float | list[float]) -> None:
        from smac.runhistory.dataclasses import TrialValue

        self.smac.tell(handle, TrialValue(cost=self._sign * float(value)))

    def extra(self) -> dict[str, Any]:
        return {}


def make(method: str, space: Space, directions: list[str], seed: int, trials: int, *,
         constant_liar: bool = True) -> Peer:
    """The ask/tell peer ``method`` (see the module docstring) for ``trials`` trials of ``space``."""
    if is_calibo(method):
        return CaliboPeer(space, directions, seed, calibo_overrides(method))
    if method.startswith("optuna_"):
        return OptunaPeer(space, directions, seed, method.removeprefix("optuna_"), constant_liar)
    if method == "random":
        return RandomPeer(space, seed, trials)
    if method == "smac":
        return SmacPeer(space, directions, seed, trials)
    raise ValueError(f"{method!r} has no ask/tell peer" + (": run it with run_loop" if method in LOOP_ONLY else ""))


# ------------------------------------------------------------------ loop-only peers
def run_loop(method: str, space: Space, direction: str, objective: Callable[[dict[str, Any]], float],
             trials: int, seed: int) -> dict[str, Any]:
    """A loop-only peer's own sequential loop: ``{"values", "wall_s", "overhead_s"}`` (overhead: the
    wall time outside the objective, the optimizer's cost as a user feels it)."""
    logging.getLogger().setLevel(logging.WARNING)
    values: list[float] = []
    spent = [0.0]

    def f(params: dict[str, Any]) -> float:
        t = time.perf_counter()
        v = float(objective(params))
        spent[0] += time.perf_counter() - t
        values.append(v)
        return v

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "confopt":
            _confopt(space, direction, f, trials, seed)
        elif method.startswith("optuna."):
            _optuna_optimize(method.split(".", 1)[1], space, direction, f, trials, seed)
        else:
            raise ValueError(f"unknown loop-only peer {method!r}")
    wall = time.perf_counter() - t0
    return {"values": values[:trials], "wall_s": wall, "overhead_s": wall - spent[0]}


def _optuna_optimize(sampler: str, space: Space, direction: str, f: Callable, trials: int, seed: int) -> None:
    """A user's Optuna loop: ``study.optimize`` with calibo's sampler or Optuna's GP / TPE."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if sampler == "calibo":
        from calibo.optuna import CaliboSampler

        smp = CaliboSampler(seed=seed)
    else:
        smp = optuna.samplers.TPESampler(seed=seed) if sampler == "tpe" else optuna.samplers.GPSampler(seed=seed)
    study = optuna.create_study(direction=direction, sampler=smp)
    study.optimize(lambda trial: f(optuna_params(trial, space)), n_trials=trials)


def _confopt(space: Space, direction: str, f: Callable, trials: int, seed: int) -> None:
    from confopt.tuning import ConformalTuner
    from confopt.wrapping import CategoricalRange, FloatRange, IntRange

    codes = _choice_codes(space, (str, int, float, bool))  # what ConfOpt's CategoricalRange holds
    ranges = {}
    for name, s in space.items():
        if s["type"] == "float":
            ranges[name] = FloatRange(min_value=s["low"], max_value=s["high"], log_scale=s.get("log", False))
        elif s["type"] == "int":
            ranges[name] = IntRange(min_value=s["low"], max_value=s["high"], log_scale=s.get("log", False))
        else:
            ranges[name] = CategoricalRange(choices=list(codes[name]))

    def objective(configuration: Dict) -> float:  # noqa: UP006
        return f({k: (codes[k][v] if k in codes else v) for k, v in dict(configuration).items()})

    tuner = ConformalTuner(objective, ranges, minimize=direction == "minimize")
    tuner.tune(max_searches=trials, n_random_searches=15, random_state=seed, verbose=False)
