"""Pruners on constructed learning curves (service/engine/pruning.py)."""

from __future__ import annotations

import numpy as np
import pytest

from calibo.engine.errors import FieldError
from calibo.engine.pruning import (
    PRUNERS,
    Curve,
    PrunerConfig,
    bracket_of,
    confidence_curve,
    decide,
    n_brackets,
    rungs,
    uq_keep,
    window_sigma,
)

E = 27


def curves_upto(curves: list[Curve], step: int) -> list[Curve]:
    return [Curve(c.number, c.state, {s: v for s, v in c.values.items() if s <= step}) for c in curves]


def family(n: int = 24, seed: int = 0, noise: float = 0.01) -> list[Curve]:
    """Curves ``a_i + 1 / (t + 1)`` plus noise: trial i's final loss is about a_i."""
    rng = np.random.default_rng(seed)
    a = rng.random(n)
    return [Curve(i, "running", {t: float(a[i] + 1 / (t + 1) + noise * rng.standard_normal())
                                 for t in range(1, E + 1)}) for i in range(n)]


def cfg(name: str, **kw) -> PrunerConfig:
    return PrunerConfig.from_any({"name": name, "max_resource": E, **kw})


@pytest.mark.parametrize("name", ["median", "sh", "hb", "sh+", "hb+"])
def test_a_clearly_bad_curve_is_pruned(name: str) -> None:
    """Twenty good trials (complete) and one whose loss stays far above all of them: pruned at
    its first rung (median: at the first step past the warm-up; sh+/hb+: at the first rung where
    curves have a window, step 3, as a single value says nothing of a curve's uncertainty)."""
    good = [Curve(i, "complete", {t: 0.2 + 0.01 * i + 0.5 / t for t in range(1, E + 1)}) for i in range(20)]
    c = cfg(name)
    bad_number = 20
    if name.startswith("hb"):  # a trial of the most aggressive bracket: it has a rung at 1
        bad_number = next(n for n in range(20, 500) if bracket_of(c, n, 0) == 0)
        good = [g for g in good] + [Curve(n, "complete", {t: 0.2 + 0.001 * n + 0.5 / t for t in range(1, E + 1)})
                                    for n in range(500, 700) if bracket_of(c, n, 0) == 0][:20]
    bad = Curve(bad_number, "running", {})
    pruned_at = None
    for t in range(1, E + 1):
        bad.values[t] = 5.0 + 1.0 / t
        if decide(c, "minimize", bad_number, t, [*good, bad]).should_prune:
            pruned_at = t
            break
    assert pruned_at == (3 if name.endswith("+") else 1)


@pytest.mark.parametrize("name", ["sh", "hb", "sh+", "hb+"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_best_is_never_pruned_at_its_first_rung(name: str, seed: int) -> None:
    """Trials arrive one after another; the one with the best curve (lowest at every step) goes on
    at its first rung, whatever the others reported before it."""
    curves = family(30, seed)
    best = min(curves, key=lambda c: c.values[1])
    for c in curves:  # make it the best at every step
        if c is not best:
            for t in c.values:
                c.values[t] = max(c.values[t], best.values[t] + 0.05)
    c = cfg(name)
    seen: list[Curve] = []
    for trial in curves:
        seen.append(Curve(trial.number, "running", {}))
        rate = bracket_of(c, trial.number, 0) if name.startswith("hb") else 0
        first = rungs(c, rate)[0] if rungs(c, rate) else None
        for t in range(1, E + 1):
            seen[-1].values[t] = trial.values[t]
            d = decide(c, "minimize", trial.number, t, seen)
            if d.should_prune:
                assert trial is not best, f"the best trial was pruned at step {t}"
                break
            if first is not None and t == first and trial is best:
                assert d.rung == first and not d.should_prune
        else:
            seen[-1].state = "complete"


def test_sh_keeps_the_top_fraction_at_a_rung() -> None:
    curves = family(30)
    c = cfg("sh")
    at3 = curves_upto(curves, 3)
    decisions = {x.number: decide(c, "minimize", x.number, 3, at3) for x in curves}
    kept = [n for n, d in decisions.items() if not d.should_prune]
    assert len(kept) == 30 // 3 and all(d.rung == 3 and d.competitors == 30 for d in decisions.values())
    ranked = sorted(curves, key=lambda x: x.values[3])
    assert set(kept) == {x.number for x in ranked[:10]}
    # between rungs nothing is pruned
    assert not any(decide(c, "minimize", x.number, 2, curves_upto(curves, 2)).should_prune for x in curves[1:])


def test_direction_maximize_mirrors_minimize() -> None:
    curves = family(30)
    neg = [Curve(x.number, x.state, {s: -v for s, v in x.values.items()}) for x in curves]
    for name in ("sh", "sh+", "median"):
        c = cfg(name)
        a = [decide(c, "minimize", x.number, 3, curves_upto(curves, 3)).should_prune for x in curves]
        b = [decide(c, "maximize", x.number, 3, curves_upto(neg, 3)).should_prune for x in neg]
        assert a == b


def test_sh_plus_keeps_more_when_curves_are_uncertain() -> None:
    """The UQ-guided keep count follows the curves' uncertainty: with the same values at the rung,
    noisy curves (wide windows) keep more candidates than flat ones."""
    mu = np.linspace(0.0, 1.0, 30)
    assert uq_keep(mu, np.full(30, 0.3), 0.01, 60) > uq_keep(mu, np.full(30, 0.01), 0.001, 60)
    assert uq_keep(mu, np.full(30, 1e-6), 0.0, 60) == 1  # no doubt: only the leader goes on
    assert uq_keep([0.5], [0.1], 0.01, 10) == 1


def test_confidence_curve_matches_a_monte_carlo_estimate() -> None:
    """eq. 3 with per-candidate sigma, against sampling the converged losses."""
    mu = np.array([0.1, 0.15, 0.3, 0.32, 0.6])
    sigma = np.array([0.05, 0.1, 0.08, 0.2, 0.1])
    p = confidence_curve(mu, sigma)
    rng = np.random.default_rng(0)
    draws = rng.normal(mu, sigma, size=(200_000, 5))
    winner = draws.argmin(axis=1)
    mc = np.cumsum(np.bincount(winner, minlength=5) / len(winner))
    assert np.allclose(p, mc, atol=0.005) and p[-1] == pytest.approx(1.0)


def test_window_sigma_is_eq1() -> None:
    values = {t: float(t) for t in range(1, 21)}
    assert window_sigma(values, 20, 10) == pytest.approx(np.std(np.arange(10, 21), ddof=1))
    assert window_sigma({3: 1.0}, 3, 10) is None


def test_median_waits_for_startup_trials_and_compares_at_the_step() -> None:
    c = cfg("median", n_startup_trials=3)
    done = [Curve(i, "complete", {1: 1.0 + i, 2: 0.5 + i}) for i in range(2)]
    me = Curve(9, "running", {1: 10.0})
    assert not decide(c, "minimize", 9, 1, [*done, me]).should_prune  # 2 < 3 completed
    done.append(Curve(2, "complete", {1: 3.0, 2: 2.5}))
    assert decide(c, "minimize", 9, 1, [*done, me]).should_prune  # 10 > median(1, 2, 3)
    me2 = Curve(10, "running", {1: 1.5})
    assert not decide(c, "minimize", 10, 1, [*done, me2]).should_prune


def test_hyperband_brackets_are_reproducible_and_weighted() -> None:
    c = cfg("hb", max_resource=81)
    assert n_brackets(c) == 5
    draws = [bracket_of(c, n, 7) for n in range(4000)]
    assert draws == [bracket_of(c, n, 7) for n in range(4000)]
    counts = np.bincount(draws, minlength=5) / 4000
    weights = np.array([81, 34, 15, 8, 5])  # ceil(5/(s+1) * 3**s) for s = 4..0, by early-stopping rate 0..4
    assert np.allclose(counts, weights / weights.sum(), atol=0.03)
    assert rungs(c, 0) == [1, 3, 9, 27] and rungs(c, 4) == []


def test_none_and_past_max_resource_never_prune() -> None:
    curves = family(10)
    assert not decide(cfg("none"), "minimize", 3, 5, curves).should_prune
    assert not decide(cfg("sh"), "minimize", 3, E, curves).should_prune


@pytest.mark.parametrize("bad, field", [
    ({"name": "nope"}, "pruner.name"), (7, "pruner"), ({"name": "sh", "window": 0}, "pruner.window"),
    ({"name": "sh", "reduction_factor": 1}, "pruner.reduction_factor"), ({"name": "sh", "x": 1}, "pruner.x"),
    ({"name": "sh", "min_resource": 9, "max_resource": 3}, "pruner.max_resource"),
    ({"name": "sh", "feed_pruned": 1}, "pruner.feed_pruned"),
])
def test_bad_pruner_settings_name_the_field(bad: object, field: str) -> None:
    with pytest.raises(FieldError) as e:
        PrunerConfig.from_any(bad)
    assert e.value.field == field


def test_config_round_trips() -> None:
    for name in PRUNERS:
        c = cfg(name, window=5)
        assert PrunerConfig.from_dict(c.to_dict()) == c


def test_uq_guided_rung_without_windows_keeps_everyone() -> None:
    """At a rung where no curve has two values (eq. 1 undefined) sh+ keeps every candidate; sh
    keeps its fraction."""
    curves = family(30)
    at1 = curves_upto(curves, 1)
    plus = [decide(cfg("sh+"), "minimize", c.number, 1, at1) for c in curves]
    assert not any(d.should_prune for d in plus) and all(d.kept == 30 for d in plus)
    assert sum(decide(cfg("sh"), "minimize", c.number, 1, at1).should_prune for c in curves) == 20
