"""select: a snapshot and a study's adaptive state -> suggestions. Cheap numpy, milliseconds.

Raw quantiles become calibrated ones at the *current* alphas, the acquisition scores the
candidates (conditioned on the running trials), and each suggestion carries the ``Prediction`` it
was chosen on. Before the warm-up is over, or without a snapshot, points come from the study's
scrambled Sobol sequence.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from . import acquisition as acq
from . import crowd, multi, reprs
from .config import SEARCH_CONFORMALIZED_FROM, EngineConfig
from .conformal import Bounds, pair_alphas, pair_intervals
from .failures import likely
from .outcomes import sign_of
from .prediction import Interval, OutcomePrediction, Prediction
from .scoring import MultiScore, narrows, scored, with_feasibility
from .snapshot import Snapshot
from .space import SearchSpace
from .state import StudyState
from .warp import BIG, Warp

P = TypeVar("P")


@dataclass
class Suggestion(Generic[P]):
    """A configuration to evaluate, and the calibrated prediction it was chosen on (None in the
    warm start): quantiles, mean and intervals in the user's units. ``select`` gives a
    ``Prediction`` (``Suggestion[Prediction]``); the in-process ``Optimizer`` its plain data
    (``Prediction.to_dict``: ``Suggestion[dict[str, Any]]``)."""

    params: dict[str, Any]
    prediction: P | None = None

    def __repr__(self) -> str:
        return reprs.build(self, ("params", reprs.params(self.params)),
                           ("prediction", reprs.prediction(self.prediction)))


def _user_view(q_int: np.ndarray, sign: float, warp: Warp) -> np.ndarray:
    """Internal (minimise, warped) quantiles, levels ascending -> user units, levels ascending."""
    q = warp.inverse(q_int)
    return q if sign > 0 else -q[::-1]


def _finite(x: float) -> float:
    """A number a prediction can carry in JSON: infinities saturate at the warp's bound."""
    return float(np.clip(np.nan_to_num(float(x), nan=0.0, posinf=BIG, neginf=-BIG), -BIG, BIG))


def _outcome(bounds: Bounds, method: str, levels: np.ndarray, row: int, Q: np.ndarray, alphas: np.ndarray,
             sign: float, warp: Warp) -> OutcomePrediction:
    """One outcome's calibrated prediction at candidate ``row``, in the user's units, with what
    ``adapt`` needs (the conformal point sets, the orientation, the warp)."""
    L = levels.size
    q_user = _user_view(Q[row], sign, warp)
    # (2, P, n): each pair's sorted lower / upper point sets, for adapt
    pts = None if method == "raw" else bounds.packed(row)
    intervals = []
    # A pair's interval is its own conformal set at its alpha, the set beta_t (adapt) refers to,
    # nested with the others' (conformal.nested); Q is sorted across pairs for the acquisition.
    nominal = pair_alphas(levels)
    if pts is None:
        lows, highs = Q[row, : nominal.size], Q[row, L - 1 : L - 1 - nominal.size : -1]
    else:
        lows, highs = pair_intervals(pts, alphas[: nominal.size])
    for j, a in enumerate(nominal):
        ends = np.array([lows[j], highs[j]])
        lo, hi = (float(v) for v in np.where(np.isinf(ends), ends, warp.inverse(ends)))  # unbounded stays so
        if sign < 0:
            lo, hi = -hi, -lo
        intervals.append(Interval(round(1.0 - float(a), 10), float(alphas[j]), float(lo), float(hi)))
    with np.errstate(over="ignore", invalid="ignore"):  # saturated far quantiles (engine.warp) may overflow
        mean = acq.mean_of(np.sort(warp.inverse(Q[row : row + 1]), axis=1), levels)[0]
    return OutcomePrediction(method=method, levels=levels.tolist(), quantiles=q_user.tolist(),
                             mean=_finite(sign * mean), intervals=intervals, sign=sign,
                             warp=None if warp.identity else warp.to_dict(), points=pts)


def _prediction(snap: Snapshot, row: int, Q: np.ndarray, alphas: np.ndarray, sign: float,
                acquisition: str, score: float, heads: Sequence[tuple[np.ndarray, np.ndarray]] = (),
                log_pf: np.ndarray | None = None) -> Prediction:
    """The prediction a suggestion is chosen on: the objective's (with several objectives, one per
    objective), and each constraint's (``heads``: the calibrated quantiles and alphas of every
    snapshot head)."""
    def of(kind: str) -> list[OutcomePrediction]:
        return [_outcome(h.bounds(snap.method), snap.method, snap.levels, row, Qh, ah, h.sign,
                         Warp.from_dict(h.warp))
                for h, (Qh, ah) in zip(snap.heads, heads, strict=True) if h.kind == kind]

    outcomes = [_outcome(snap.bounds, snap.method, snap.levels, row, Q, alphas, sign,
                         Warp.from_dict(snap.meta.warp))]
    if snap.meta.directions:
        outcomes += of("objective")
    constrained = any(h.kind == "constraint" for h in snap.heads)
    return Prediction(outcomes, snap.surrogate, snap.n_obs, acquisition, _finite(score),
                      constraints=of("constraint") if constrained else None,
                      feasibility=float(np.exp(log_pf[row])) if constrained and log_pf is not None else None)


def warmup_points(space: SearchSpace, seed: int, start: int, count: int,
                  exclude: set[bytes]) -> np.ndarray:
    """Points ``start..`` of the study's scrambled Sobol sequence, skipping excluded ones."""
    out: list[np.ndarray] = []
    keys: set[bytes] = set()
    pos = start
    while len(out) < count and pos < start + 64 * count + 64:
        batch = space.sample(count, seed, skip=pos)
        for row, k in zip(batch, space.keys(batch), strict=True):
            pos += 1
            if k not in exclude and k not in keys:
                keys.add(k)
                out.append(row)
                if len(out) == count:
                    break
    rng = np.random.default_rng([seed, start])
    size = space.size
    tries = 0
    while len(out) < count and tries < 1000:  # small discrete space: uniform draws for what is left
        if size is not None and len(keys) + len(exclude) >= size and len(keys | set(exclude)) >= size:
            break  # every configuration is taken
        tries += 1
        batch = space.sample_uniform(64, rng)
        for row, k in zip(batch, space.keys(batch), strict=True):
            if k not in exclude and k not in keys:
                keys.add(k)
                out.append(row)
                if len(out) == count:
                    break
    return np.array(out).reshape(-1, space.dim)


def select(
    snapshot: Snapshot | None,
    state: StudyState,
    space: SearchSpace,
    config: EngineConfig,
    *,
    count: int = 1,
    direction: str = "minimize",
    asked: int = 0,
    exclude: Sequence[dict[str, Any]] = (),
    pending: Sequence[dict[str, Any]] = (),
    n_observed: int | None = None,
    exclude_keys: Collection[bytes] = (),
) -> list[Suggestion[Prediction]]:
    """``count`` distinct configurations, chosen on the study's adaptive ``state`` (its seed keys
    the warm-up sequence and the draws).

    ``exclude``: configurations never to return (observed since the snapshot,
    failed ...). ``pending``: running configurations; never returned, and the
    choice is conditioned on them (``engine.crowd``), as is each further choice of a batch on the
    ones before it. ``asked``: how many trials
    the study has asked so far (position in its warm-start sequence and the
    select rng's key). ``exclude_keys``: like ``exclude``, as ``space.keys``
    of the configurations (what the service stores with each trial). Before
    the warm-up (``EngineConfig.warmed_up``: from 5 observations once the snapshot's model ranks
    held-out results better than chance, else after ``n_warmup``), or without a snapshot, points
    come from the study's scrambled Sobol sequence. With snapshot
    heads (further objectives, constraints) the acquisition is the multi-objective one, weighed by
    the calibrated probability of feasibility.
    """
    sign = sign_of(direction)
    seed = state.seed
    rng = np.random.default_rng([seed, asked, 11])
    pend_unit, pend_keys, busy_keys = _busy(space, pending, exclude, exclude_keys)
    n_obs = snapshot.n_obs if n_observed is None and snapshot is not None else (n_observed or 0)
    if snapshot is None or not config.warmed_up(n_obs, snapshot.meta.rank_p):
        if snapshot is not None:
            busy_keys |= set(space.keys(snapshot.observed))
        pts = warmup_points(space, seed, asked, count, busy_keys)
        return [Suggestion(p, None) for p in space.from_unit(pts)] if len(pts) else []

    index = _index(snapshot)
    alive = _alive(snapshot, index, busy_keys)
    alphas = np.array([s.alpha for s in state.states], dtype=float)
    Q = snapshot.bounds.at(alphas)  # what each suggestion's prediction reports, and adapt scores
    raw_search = snapshot.n_obs < SEARCH_CONFORMALIZED_FROM
    narrowed = narrows(config, several=bool(snapshot.meta.directions))
    view = crowd.Crowd(snapshot, space,
                       scored(_searched(Q, snapshot.raw, raw_search), snapshot.signal if narrowed else None))
    if pending:
        view.add(view.rows_of(pend_unit, pend_keys, index))
    heads, log_pf = _calibrated_heads(snapshot, state, raw_search)
    score, acquisition, kind = _scoring(snapshot, config, view, heads, log_pf, raw_search, rng,
                                        np.random.default_rng([seed, asked, 17]))

    rows, scores = _choose(view, score, acquisition, kind, alive, count, rng)
    params = space.from_unit(snapshot.candidates[rows]) if rows else []
    # the prediction is the calibrated one: the running points' outcomes are not known
    out = [Suggestion(p, _prediction(snapshot, row, Q, alphas, sign, kind.name, sc, heads, log_pf))
           for p, row, sc in zip(params, rows, scores, strict=True)]
    if len(out) < count:
        # The snapshot's candidates are used up (a crowd asked faster than fits land): the rest
        # comes from the study's quasi-random sequence, without a prediction, rather than nothing.
        taken = busy_keys | set(snapshot.candidate_keys()[r] for r in rows) | set(space.keys(snapshot.observed))
        pts = warmup_points(space, seed, asked + len(out), count - len(out), taken)
        out += [Suggestion(p, None) for p in space.from_unit(pts)] if len(pts) else []
    return out


def queued_first(space: SearchSpace, queued: Sequence[dict[str, Any]], chosen: Sequence[Suggestion[Prediction]],
                 rng: np.random.Generator) -> list[Suggestion[Prediction]]:
    """Enqueued configurations handed out first, in the order enqueued, then the rest of ``chosen``
    (what the select chose for the ask): a complete one as it is; a partial one completed from the
    next chosen configuration, or by uniform draws where none is left (``SearchSpace.fill``),
    without a prediction (it was not chosen on one). Every home hands its queue out so (the service,
    ``Optimizer``)."""
    donors = iter(chosen)
    out: list[Suggestion[Prediction]] = []
    for q in queued:
        if space.complete(q):
            out.append(Suggestion(dict(q), None))
        else:
            donor = next(donors, None)
            out.append(Suggestion(space.fill(q, donor.params if donor is not None else {}, rng), None))
    return out + list(donors)


def _busy(space: SearchSpace, pending: Sequence[dict[str, Any]], exclude: Sequence[dict[str, Any]],
          exclude_keys: Collection[bytes]) -> tuple[np.ndarray, list[bytes], set[bytes]]:
    """The running configurations (unit rows, keys) and every key a suggestion must not have."""
    pend_unit = space.to_unit(list(pending)) if pending else np.empty((0, space.dim))
    pend_keys = space.keys(pend_unit) if pending else []
    busy_keys = set(pend_keys)
    if exclude:
        busy_keys.update(space.keys(space.to_unit(list(exclude))))
    busy_keys.update(exclude_keys)
    return pend_unit, pend_keys, busy_keys


def _choose(view: crowd.Crowd, score: Any, acquisition: str, kind: _Kind, alive: np.ndarray, count: int,
            rng: np.random.Generator) -> tuple[list[int], list[float]]:
    """The batch: up to ``count`` alive candidate rows, each the best scored given the ones before it
    (added to the crowd's view), with the score it was chosen on."""
    rows: list[int] = []
    scores: list[float] = []
    for _ in range(count):
        if not alive.any():
            break
        if kind.mo is not None and kind.mo.kind == "parego":  # ParEGO: a fresh scalarisation for every choice
            kind.mo.weights = multi.simplex_weights(kind.mo.m, rng)
        sc = view.scores(score, acquisition)
        idx = np.flatnonzero(alive)
        row = int(idx[np.argmin(sc[idx])])
        rows.append(row)
        scores.append(sc[row])
        alive[row] = False
        if len(rows) < count:  # the next choice of the batch is conditioned on this one
            view.add([row])
    return rows, scores


def _index(snapshot: Snapshot) -> dict[bytes, int]:
    """Candidate key -> row, computed once per snapshot (kept in its cache)."""
    index: dict[bytes, int] | None = snapshot.cache.get("index")
    if index is None:
        index = snapshot.cache["index"] = {k: i for i, k in enumerate(snapshot.candidate_keys())}
    return index


def _alive(snapshot: Snapshot, index: dict[bytes, int], busy_keys: set[bytes]) -> np.ndarray:
    """The busy mask, inverted: the candidates select may still return (not observed, running or
    excluded; with a failure model, no near-duplicate of a failure, and what likely runs where any
    candidate does)."""
    keys = snapshot.candidate_keys()
    alive = np.ones(snapshot.candidates.shape[0], dtype=bool)
    if len(index) == len(keys):  # distinct candidates (fit's own set): one lookup per busy key
        alive[[index[k] for k in busy_keys if k in index]] = False
    elif busy_keys:  # given candidates may repeat a configuration
        alive &= np.array([k not in busy_keys for k in keys])
    if snapshot.success is not None:
        alive = likely(snapshot.success, alive)
    return alive


def _searched(calibrated: np.ndarray, raw: np.ndarray, raw_search: bool) -> np.ndarray:
    """What the acquisition scores of an outcome: its calibrated quantiles from
    ``SEARCH_CONFORMALIZED_FROM`` observations on (the quantile HPO paper's schedule), its
    surrogate's own before (as ``Bounds.at`` gives a raw fit's)."""
    return raw if raw_search else calibrated


def _calibrated_heads(snapshot: Snapshot, state: StudyState, raw_search: bool
                      ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray | None]:
    """Each snapshot head's calibrated quantiles at its current alphas (and those alphas), and the
    log probability of satisfying every constraint (None without constraint heads)."""
    heads: list[tuple[np.ndarray, np.ndarray]] = []
    if not snapshot.heads:
        return heads, None
    head_states = state.heads
    if len(head_states) != len(snapshot.heads):
        raise ValueError(f"the snapshot has {len(snapshot.heads)} heads; "
                         f"the study state has {len(head_states)}")
    for h, hs in zip(snapshot.heads, head_states, strict=True):
        ah = np.array([st.alpha for st in hs], dtype=float)
        heads.append((h.bounds(snapshot.method).at(ah), ah))
    log_pf = sum(acq.log_prob_below(_searched(Qh, h.raw, raw_search), snapshot.levels, h.threshold)
                 for h, (Qh, _) in zip(snapshot.heads, heads, strict=True) if h.kind == "constraint")
    return heads, log_pf  # type: ignore[return-value]  # sum of arrays, or 0 without constraints


@dataclass
class _Kind:
    """The acquisition a select runs: its name as predictions report it, and the multi-objective
    score (None with one objective)."""

    name: str
    mo: MultiScore | None


def _scoring(snapshot: Snapshot, config: EngineConfig, view: crowd.Crowd,
             heads: Sequence[tuple[np.ndarray, np.ndarray]], log_pf: np.ndarray | None, raw_search: bool,
             rng: np.random.Generator, mo_rng: np.random.Generator) -> tuple[Any, str, _Kind]:
    """The scoring a select applies to the candidates (``view.scores`` calls it with the crowd's
    quantiles and incumbent), the acquisition's name for the crowd penalty, and its kind."""
    any_feasible = snapshot.meta.n_feasible is None or snapshot.meta.n_feasible > 0
    # what the acquisition is weighed by: the probability of satisfying the constraints and of running
    # at all (the failure model's, engine.failures), both calibrated, taken as independent
    log_ok = log_pf
    if snapshot.success is not None:
        log_ok = snapshot.success if log_ok is None else log_ok + snapshot.success
    acquisition, mo, Qs = config.acquisition, None, []
    dirs = snapshot.meta.directions
    if dirs:  # several objectives: the first is the snapshot's own outcome, the others its objective heads
        objective = [i for i, h in enumerate(snapshot.heads) if h.kind == "objective"]
        Qs = [view.Q] + [scored(_searched(heads[i][0], snapshot.heads[i].raw, raw_search),
                                snapshot.heads[i].signal) for i in objective]
        warps = [Warp.from_dict(snapshot.meta.warp)] + [Warp.from_dict(snapshot.heads[i].warp)
                                                              for i in objective]
        assert snapshot.observed_y is not None and snapshot.observed_ok is not None  # kept by every multi-objective fit
        mo = MultiScore(config, [sign_of(d) for d in dirs], snapshot.observed_y, snapshot.observed_ok, warps,
                        snapshot.levels, mo_rng)
        acquisition = "logei"  # -log of an expected improvement: how crowd penalties and feasibility combine

    def score(Qv: np.ndarray, best: float) -> np.ndarray:
        if mo is None:
            sc = acq.score(config.acquisition, Qv, snapshot.levels, best=best, rng=rng)
        else:  # the believer narrows each objective with its own kernel (view.shrinks)
            believer = view.mode == "believer" and bool(view.rows)
            shrinks = view.shrinks() if believer else [None] * len(Qs)
            sc = mo([Qj if f is None else crowd.narrow(Qj, f) for Qj, f in zip(Qs, shrinks, strict=True)],
                    believed=crowd.believed_points(Qs, view.rows) if believer else None)
        return sc if log_ok is None else with_feasibility(sc, log_ok, acquisition, any_feasible)

    return score, acquisition, _Kind(mo.kind if mo else config.acquisition, mo)



