"""What select costs with several objectives: the engine's scoring before and after it was made cheaper.

A 2-objective ``Optimizer`` (ZDT1 in ``--dim`` dimensions, default 6) is told ``--trials`` (500)
configurations: half uniform, half pulled towards the Pareto set (``x[1:]`` shrunk), so the front
holds a few dozen points as a tuned study's does. Its snapshot is fitted once (the default surrogate
and candidate set, ~2000 rows); then ``optimizer.select`` (count 1) is timed, median over
``--calls`` (50) calls, with no running trial and with 8 (the configurations a count-8 select
chooses: the believer conditions on them and scores every candidate again):

* ``before``: the multi-objective scoring as it was (``multi.scores`` with the old pieces patched
  in: a frozen copy of ``hvi_2d`` summing over every segment of the front's staircase for every
  draw, the O(n^2) ``pareto_mask`` loop and the every-pair ``_gap``);
* ``after``: ``calibo.engine.multi`` as it is (binary search on the sorted staircase, one-sort 2-D
  Pareto mask, binary-search ``_gap``).

With ``--objectives 3`` the study is DTLZ2 (3 objectives, ParEGO) and the two variants are:

* ``before``: ParEGO's Monte Carlo expected improvement for every candidate (a frozen copy of the
  old ``multi.scores`` branch) and the point-by-point Pareto mask;
* ``after``: ``calibo.engine.multi`` as it is (the expectation only for the ``SCREEN`` candidates
  whose optimistic corner improves the scalarisation most, as EHVI screens; the Pareto mask of 3-4
  objectives in lexicographic order, each standing point dropping the later ones it dominates).

With ``--acquisitions parego,ehvi`` (three objectives) the variants are instead the acquisitions
themselves, selecting from the same snapshot: what a three-objective study pays per ask for asking
for EHVI (``mo_select_cost_ehvi3.json``).

Calls alternate between the variants so load on the machine falls on all alike. Each seed (study) also
checks that both choose the same configuration and reports the largest score difference over the
candidates (Monte Carlo EHVI on the same common random numbers: only rounding may differ).

    python benchmarks/mo_select_cost.py
    python benchmarks/mo_select_cost.py --seeds 0,1,2 --trials 500 --calls 50
    python benchmarks/mo_select_cost.py --objectives 3   # ParEGO: mo_select_cost_parego.json
    python benchmarks/mo_select_cost.py --objectives 3 --acquisitions parego,ehvi --trials 200,500

Writes benchmarks/results/mo_select_cost.json (mo_select_cost_parego.json with 3 objectives).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibo.engine import multi  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PENDING = (0, 8)


# ----------------------------------------------------------- before: a frozen copy of the old scoring
def _old_hvi_2d(front: np.ndarray, ref: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    R1, R2 = float(ref[0]), float(ref[1])
    F = front[np.all(front < ref, axis=1)] if front.size else front.reshape(0, 2)
    if F.shape[0]:
        F = F[multi.pareto_mask_pairwise(F)]
        F = F[np.argsort(F[:, 0], kind="stable")]
    xs = np.concatenate([F[:, 0], [R1]]) if F.shape[0] else np.array([R1])
    heights = np.concatenate([[R2], F[:, 1]]) if F.shape[0] else np.array([R2])
    lefts = np.concatenate([[-np.inf], F[:, 0]]) if F.shape[0] else np.array([-np.inf])
    a = np.asarray(a, dtype=float)[..., None]
    b = np.asarray(b, dtype=float)[..., None]
    lo = np.maximum(lefts, a)
    hi = np.minimum(xs, R1)
    width = np.maximum(hi - lo, 0.0)
    height = np.maximum(np.minimum(heights, R2) - b, 0.0)
    return np.sum(width * height, axis=-1)


def _old_gap(med: np.ndarray, front: np.ndarray) -> np.ndarray:
    if front.shape[0] == 0:
        return np.zeros(med.shape[0])
    return np.maximum(np.min(np.max(med[:, None, :] - front[None, :, :], axis=2), axis=1), 0.0)


_PIECES = ("pareto_mask", "_staircase", "_hvi", "_gap")
# the old pieces in the places of the new: the staircase was not prepared (the old hvi_2d took the
# front itself), the improvement summed over every segment, the gap compared every front point
_OLD = {"pareto_mask": multi.pareto_mask_pairwise, "_staircase": lambda front, ref: (front, None),
        "_hvi": lambda front, _, ref, a, b: _old_hvi_2d(front, ref, a, b), "_gap": _old_gap}
_NEW: dict = {}


_SCORES = multi.scores


def _old_scores(kind, Qs, levels, front, ref, u, weights=None, incumbent=None):
    """ParEGO as it was: the Monte Carlo expectation for every candidate."""
    if kind != "parego":
        return _SCORES(kind, Qs, levels, front, ref, u, weights, incumbent)
    lv = np.asarray(levels, dtype=float)
    mid = np.stack([Q[:, lv.size // 2 - 1: lv.size // 2 + 1].mean(axis=1) for Q in Qs], axis=1)
    e = multi.parego([multi.sample(Q, lv, u[j]) for j, Q in enumerate(Qs)], incumbent, weights)
    out = multi.FLOOR + np.maximum(multi.chebyshev(mid, weights) - incumbent, 0.0)
    out[e > 0] = -np.log(e[e > 0])
    return out


class _Before:
    """``calibo.engine.multi`` with the old pieces patched in, for a ``with``: the 2-objective pieces,
    and ParEGO's unscreened branch of ``multi.scores``."""

    def __enter__(self):
        _NEW.update({k: getattr(multi, k) for k in _PIECES})
        for k in _PIECES:
            setattr(multi, k, _OLD[k])
        multi.scores = _old_scores
        return self

    def __exit__(self, *exc):
        for k in _PIECES:
            setattr(multi, k, _NEW[k])
        multi.scores = _SCORES
        return False


# ---------------------------------------------------------------------------------------- the study
def zdt1(x: np.ndarray) -> list[float]:
    g = 1.0 + 9.0 * x[1:].mean()
    return [float(x[0]), float(g * (1.0 - math.sqrt(x[0] / g)))]


def dtlz2(x: np.ndarray) -> list[float]:
    g = float(np.sum((x[2:] - 0.5) ** 2))
    a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
    return [(1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b), (1 + g) * math.sin(a)]


def study(seed: int, trials: int, dim: int, m: int = 2):
    from calibo.engine import Optimizer

    space = {f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(dim)}
    opt = Optimizer(space, directions=["minimize"] * m, seed=seed)
    rng = np.random.default_rng(seed)
    for i in range(trials):
        x = rng.random(dim)
        if i % 2:  # towards the Pareto set, so the front holds tens of points
            if m == 2:
                x[1:] *= rng.random() ** 3  # ZDT1's: x[1:] = 0
            else:
                x[2:] = 0.5 + (x[2:] - 0.5) * rng.random() ** 3  # DTLZ2's: x[2:] = 0.5
        opt.tell({f"x{j}": float(x[j]) for j in range(dim)}, zdt1(x) if m == 2 else dtlz2(x))
    return opt


def selector(opt, snap, config=None):
    """select on ``snap`` as ``opt`` would (with ``config`` in place of its own, if given)."""
    from calibo.engine.optimizer import select

    observed = [p for p, _ in opt.observations]
    config = config or opt.config

    def run(pending: list[dict], count: int = 1):
        return select(snap, opt.states, opt.space, config, count=count, direction=opt.direction,
                      seed=opt.seed, asked=len(observed), exclude=observed, pending=pending,
                      n_observed=len(observed), head_states=opt.objective_states)

    return run


def scores_of(opt, snap, pending: list[dict]) -> np.ndarray:
    """Every candidate's multi-objective score in select's first choice (what its argmin picks from)."""
    from calibo.engine import optimizer as O

    seen: list[np.ndarray] = []
    real = O._MultiScore.__call__

    def spy(self, Qs, believed=None):
        sc = real(self, Qs, believed)
        seen.append(sc)
        return sc

    O._MultiScore.__call__ = spy
    try:
        selector(opt, snap)(pending)
    finally:
        O._MultiScore.__call__ = real
    return seen[-1]


def measure(seed: int, trials: int, dim: int, calls: int, m: int = 2) -> dict:
    opt = study(seed, trials, dim, m)
    t = time.perf_counter()
    snap = opt.snapshot
    fit_s = time.perf_counter() - t
    run = selector(opt, snap)
    crowd = [s.params for s in run([], count=8)]  # what a crowd of 8 workers would be running
    Y = snap.observed_y
    out = {"seed": seed, "fit_s": fit_s, "candidates": int(snap.candidates.shape[0]),
           "front": int(multi.pareto_mask(Y).sum()), "rows": []}
    for k in PENDING:
        pending = crowd[:k]
        after_pick = run(pending)[0].params
        with _Before():
            before_pick = run(pending)[0].params
            sc_before = scores_of(opt, snap, pending)
        sc_after = scores_of(opt, snap, pending)
        times = {"before": [], "after": []}
        for _ in range(calls):
            for name in ("before", "after"):
                if name == "before":
                    with _Before():
                        t = time.perf_counter()
                        run(pending)
                        times[name].append(time.perf_counter() - t)
                else:
                    t = time.perf_counter()
                    run(pending)
                    times[name].append(time.perf_counter() - t)
        med = {n: 1e3 * float(np.median(v)) for n, v in times.items()}
        out["rows"].append({
            "pending": k,
            "before_ms": med["before"],
            "after_ms": med["after"],
            "speedup": med["before"] / med["after"],
            "before_p90_ms": 1e3 * float(np.quantile(times["before"], 0.9)),
            "after_p90_ms": 1e3 * float(np.quantile(times["after"], 0.9)),
            "same_choice": after_pick == before_pick,
            "same_argmin": int(np.argmin(sc_before)) == int(np.argmin(sc_after)),
            "max_abs_score_diff": float(np.max(np.abs(sc_before - sc_after))),
        })
    return out


def measure_kinds(seed: int, trials: int, dim: int, calls: int, kinds: list[str], m: int = 3) -> dict:
    """select's median time under each multi-objective acquisition in ``kinds``, on one snapshot."""
    import dataclasses

    opt = study(seed, trials, dim, m)
    snap = opt.snapshot
    runs = {kind: selector(opt, snap, dataclasses.replace(opt.config, multi_acquisition=kind)) for kind in kinds}

    def run(kind: str, pending: list[dict], count: int = 1):
        return runs[kind](pending, count)

    crowd = [s.params for s in run(kinds[0], [], count=8)]
    out = {"seed": seed, "trials": trials, "front": int(multi.pareto_mask(snap.observed_y).sum()), "rows": []}
    for k in PENDING:
        pending = crowd[:k]
        times: dict[str, list[float]] = {kind: [] for kind in kinds}
        for kind in kinds:
            run(kind, pending)  # once untimed: each kind's first call
        for _ in range(calls):
            for kind in kinds:
                t = time.perf_counter()
                run(kind, pending)
                times[kind].append(time.perf_counter() - t)
        out["rows"].append({"pending": k, **{f"{kind}_ms": 1e3 * float(np.median(v)) for kind, v in times.items()}})
    return out


def print_table(results: dict) -> None:
    print(f"{'seed':>4} {'front':>5} {'pend':>4} {'before ms':>10} {'after ms':>9} {'x':>6} {'same':>5} "
          f"{'max |d score|':>13}")
    for s in results["studies"]:
        for r in s["rows"]:
            print(f"{s['seed']:>4} {s['front']:>5} {r['pending']:>4} {r['before_ms']:>10.2f} {r['after_ms']:>9.2f} "
                  f"{r['speedup']:>6.1f} {str(r['same_choice']):>5} {r['max_abs_score_diff']:>13.2e}")
    for k, v in results["summary"].items():
        print(f"pending {k}: median before {v['before_ms']:.2f} ms, after {v['after_ms']:.2f} ms "
              f"({v['speedup']:.1f}x); same choice in {v['same_choice']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2", help="one study per seed")
    ap.add_argument("--trials", default="500", help="told trials per study (with --acquisitions, a comma list)")
    ap.add_argument("--dim", type=int, default=6, help="the problem's dimension")
    ap.add_argument("--objectives", type=int, choices=(2, 3), default=2,
                    help="2: ZDT1 and EHVI; 3: DTLZ2 and ParEGO")
    ap.add_argument("--calls", type=int, default=50, help="timed select calls per variant and cell")
    ap.add_argument("--out", type=Path, default=None, help="default: results/mo_select_cost.json "
                    "(mo_select_cost_parego.json with 3 objectives, mo_select_cost_ehvi3.json with --acquisitions)")
    ap.add_argument("--acquisitions", default=None,
                    help="three objectives: time these acquisitions against each other (e.g. parego,ehvi)")
    args = ap.parse_args()
    if args.acquisitions:
        kinds = args.acquisitions.split(",")
        if args.objectives != 3 or not set(kinds) <= {"parego", "ehvi"}:
            ap.error("--acquisitions takes parego and/or ehvi, with --objectives 3")
        compare_acquisitions(args, kinds)
        return
    if args.out is None:
        args.out = RESULTS / ("mo_select_cost.json" if args.objectives == 2 else "mo_select_cost_parego.json")

    t0 = time.perf_counter()
    args.trials = int(args.trials)
    studies = [measure(int(s), args.trials, args.dim, args.calls, args.objectives)
               for s in args.seeds.split(",") if s]
    summary = {}
    for k in PENDING:
        rows = [r for s in studies for r in s["rows"] if r["pending"] == k]
        b = float(np.median([r["before_ms"] for r in rows]))
        a = float(np.median([r["after_ms"] for r in rows]))
        summary[str(k)] = {"before_ms": b, "after_ms": a, "speedup": b / a,
                           "same_choice": f"{sum(r['same_choice'] for r in rows)}/{len(rows)}"}
    results = {
        "meta": {"task": f"{'zdt1' if args.objectives == 2 else 'dtlz2'}-{args.dim}d",
                 "acquisition": "ehvi" if args.objectives == 2 else "parego", "trials": args.trials, "calls": args.calls, "count": 1,
                 "pending": list(PENDING), "python": platform.python_version(), "numpy": np.__version__,
                 "machine": platform.machine(), "processor": platform.processor(),
                 "wall_s": time.perf_counter() - t0},
        "studies": studies,
        "summary": summary,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print_table(results)
    print(f"wrote {args.out}")


def compare_acquisitions(args: argparse.Namespace, kinds: list[str]) -> None:
    """``--acquisitions``: one study per seed and per --trials value, each kind timed on its snapshot."""
    t0 = time.perf_counter()
    out = args.out or RESULTS / "mo_select_cost_ehvi3.json"
    studies = [measure_kinds(int(s), int(n), args.dim, args.calls, kinds)
               for n in args.trials.split(",") for s in args.seeds.split(",") if s]
    print(f"{'seed':>4} {'trials':>6} {'front':>5} {'pend':>4} " + " ".join(f"{k + ' ms':>10}" for k in kinds))
    for st in studies:
        for r in st["rows"]:
            print(f"{st['seed']:>4} {st['trials']:>6} {st['front']:>5} {r['pending']:>4} "
                  + " ".join(f"{r[k + '_ms']:>10.1f}" for k in kinds))
    results = {"meta": {"task": f"dtlz2-{args.dim}d", "acquisitions": kinds, "trials": args.trials,
                        "calls": args.calls, "count": 1, "pending": list(PENDING),
                        "python": platform.python_version(), "numpy": np.__version__,
                        "machine": platform.machine(), "wall_s": time.perf_counter() - t0},
               "studies": studies}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
