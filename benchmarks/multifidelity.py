"""Multi-fidelity pruning on real learning curves: calibo's pruners against Optuna's.

A tabular benchmark (like the NAS-Bench / LCBench runs of uq-guided-hpo.txt,
section 4): every method sees the same learning curves, so the comparison
isolates the pruner.

Curve tables. For each dataset (``load_digits`` and ``load_breast_cancer``,
both shipped with scikit-learn) ``--configs`` configurations of an
``MLPClassifier`` (adam; hidden units log-uniform in [16, 128], alpha
log-uniform in [1e-6, 1e-1], learning_rate_init log-uniform in [1e-4, 1e-1],
batch size in {32, 64, 128}, activation relu / tanh; the same configurations
on both datasets, drawn from ``--table-seed``) are trained epoch by epoch with
``partial_fit`` for ``--epochs`` epochs (split: 25 % test, then 1/3 of the
rest validation, 2/3 train, stratified, inputs standardised on train). The
value a trial reports after epoch t is the validation LOG LOSS at t (lower is
better; continuous, so no ties between configurations); the test log loss at
the last epoch is kept as a secondary outcome. Tables are cached (``--cache``,
outside the repository by default) and rebuilt when their settings differ.

Simulation, per (method, dataset, seed): ``--in-flight`` W asynchronous
workers on a virtual clock, one epoch = one time unit per worker (lockstep;
within a tick, workers report in index order and each sees every earlier
report). The seed fixes the order in which configurations are drawn from the
table (a permutation, renewed if exhausted), the same for every method: only
the pruning differs. A free worker takes the next configuration and "trains"
it epoch by epoch from the table, reporting each epoch and asking the pruner
after each report before the last (at epoch E the run is complete: no pruner
is asked, Optuna's SH would otherwise prune completed runs at rung 27); it
stops when pruned or at E. The run ends when ``--budget`` x E epochs are spent.

Returned configuration after b epochs: the completed trial with the best
validation loss at E; before any trial completed, the trial with the smallest
value at its last reported step. Regret (primary): its validation loss at E
minus the best validation loss at E over the whole table ("converged" loss,
what the search optimises, so an oracle has regret 0); the same with the test
loss is kept as ``test_regret``. Normalised regret (for averaging over
datasets) divides by the table's median-minus-best converged loss.

Methods: ``none``; calibo's ``median``, ``sh``, ``hb``, ``sh+``, ``hb+``
(``calibo.engine.pruning.decide`` on every trial's curve, state running /
complete / pruned, min_resource 1, max_resource E, reduction_factor 3; median
with n_startup_trials 5, n_warmup_steps 0; the hb seed is the run's seed);
Optuna's ``optuna_median`` (MedianPruner()), ``optuna_sh``
(SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)) and
``optuna_hb`` (HyperbandPruner(min_resource=1, max_resource=E,
reduction_factor=3)) on a real in-memory study (enqueue_trial + ask, report,
should_prune, tell; the study is named after dataset and seed so Optuna's
hyperband brackets are reproducible).

Reported: mean (sem) regret over seeds against the budget fraction, per
dataset and averaged (normalised) over datasets; the epochs each method needs
to reach calibo sh's final regret, as a fraction of the budget (sh's epochs):
the first budget point (1 % steps) from which the method's MEAN regret curve
stays at or below sh's mean regret at budget 1.0 (primary; the per-seed median of the
same with each seed's own target is kept as well); keep counts of the
rung-based calibo pruners (Decision.kept / competitors per rung); the aims:

* sh+ needs <= 60 % of sh's epochs (on the dataset-averaged normalised curve,
  and per dataset);
* calibo's sh / hb not worse than Optuna's SH / HB: mean normalised final
  regret over datasets x seeds <= Optuna's + ``--tolerance`` (a sign test over
  the paired cells is reported alongside).

    python -m benchmarks.multifidelity --workers 2                 # everything (10 seeds; ~3 min on 2 cores)
    python -m benchmarks.multifidelity --seeds 2 --configs 60 --budget 10 --methods none,sh,sh+,optuna_sh

Writes benchmarks/results/multifidelity.json and multifidelity.png.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy: one core per process

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.harness import report, runner  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "calibo" / "multifidelity_curves.npz"
DATASETS = ("digits", "breast_cancer")
CALIBO = ("median", "sh", "hb", "sh+", "hb+")
OPTUNA = ("optuna_median", "optuna_sh", "optuna_hb")
METHODS = ("none", *CALIBO, *OPTUNA)
REDUCTION = 3
GRID = np.round(np.arange(1, 101) / 100, 2)  # budget fractions at which regret is recorded
TABLE_AT = (0.1, 0.25, 0.5, 0.75, 1.0)
SLOW = ("hb", "hb+", "sh+", "sh", "optuna_hb")  # started first so the pool drains evenly


# -------------------------------------------------------------- curve tables
def sample_configs(n: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [{"hidden": int(round(np.exp(rng.uniform(np.log(16), np.log(128))))),
             "alpha": float(10 ** rng.uniform(-6, -1)),
             "learning_rate_init": float(10 ** rng.uniform(-4, -1)),
             "batch_size": int(rng.choice([32, 64, 128])),
             "activation": str(rng.choice(["relu", "tanh"]))} for _ in range(n)]


_DATA: dict[str, tuple] = {}


def _split(name: str) -> tuple:
    """Standardised train / validation / test arrays of a scikit-learn dataset (fixed split)."""
    if name not in _DATA:
        from sklearn import datasets
        from sklearn.model_selection import train_test_split
        from sklearn.preprocessing import StandardScaler

        X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
        Xr, Xte, yr, yte = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
        Xtr, Xva, ytr, yva = train_test_split(Xr, yr, test_size=1 / 3, random_state=0, stratify=yr)
        sc = StandardScaler().fit(Xtr)
        _DATA[name] = (sc.transform(Xtr), ytr, sc.transform(Xva), yva, sc.transform(Xte), yte, np.unique(y))
    return _DATA[name]


def _safe_log_loss(y: np.ndarray, proba: np.ndarray, classes: np.ndarray) -> float:
    from sklearn.metrics import log_loss

    if not np.all(np.isfinite(proba)):  # a diverged network: as bad as a clipped certain mistake
        return float(-np.log(1e-15))
    return float(log_loss(y, proba, labels=classes))


def train_curve(job: tuple[str, int, dict[str, Any], int]) -> tuple[str, int, list[float], float, float, float]:
    """One configuration's validation log loss per epoch, its test log loss and val/test error at the end."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    name, i, cfg, epochs = job
    Xtr, ytr, Xva, yva, Xte, yte, classes = _split(name)
    model = MLPClassifier(hidden_layer_sizes=(cfg["hidden"],), alpha=cfg["alpha"], batch_size=cfg["batch_size"],
                          learning_rate_init=cfg["learning_rate_init"], activation=cfg["activation"],
                          solver="adam", random_state=i)
    curve = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(epochs):
            model.partial_fit(Xtr, ytr, classes=classes)
            curve.append(_safe_log_loss(yva, model.predict_proba(Xva), classes))
        test = _safe_log_loss(yte, model.predict_proba(Xte), classes)
        val_err = float(np.mean(model.predict(Xva) != yva))
        test_err = float(np.mean(model.predict(Xte) != yte))
    return name, i, curve, test, val_err, test_err


def build_tables(datasets: list[str], n: int, epochs: int, seed: int, workers: int) -> dict[str, dict]:
    from tqdm import tqdm

    configs = sample_configs(n, seed)
    out = {d: {"val": np.zeros((n, epochs)), "test": np.zeros(n), "val_err": np.zeros(n), "test_err": np.zeros(n)}
           for d in datasets}
    jobs = [(d, i, c, epochs) for d in datasets for i, c in enumerate(configs)]
    with ProcessPoolExecutor(workers) as pool:
        for name, i, curve, test, ve, te in tqdm(pool.map(train_curve, jobs, chunksize=8), total=len(jobs),
                                                   desc="curve tables"):
            t = out[name]
            t["val"][i], t["test"][i], t["val_err"][i], t["test_err"][i] = curve, test, ve, te
    for d in datasets:
        out[d]["configs"] = configs
    return out


def _table_key(datasets: list[str], n: int, epochs: int, seed: int) -> str:
    import sklearn

    return json.dumps({"datasets": datasets, "configs": n, "epochs": epochs, "table_seed": seed,
                       "sklearn": sklearn.__version__, "version": 1})


def load_tables(path: Path, datasets: list[str], n: int, epochs: int, seed: int, workers: int,
                rebuild: bool = False) -> tuple[dict[str, dict], float]:
    """The cached tables when their settings match, else built (and cached); and the build seconds."""
    key = _table_key(datasets, n, epochs, seed)
    if path.exists() and not rebuild:
        with np.load(path, allow_pickle=False) as z:
            if str(z["key"]) == key:
                configs = json.loads(str(z["configs"]))
                return {d: {"val": z[f"{d}_val"], "test": z[f"{d}_test"], "val_err": z[f"{d}_val_err"],
                            "test_err": z[f"{d}_test_err"], "configs": configs} for d in datasets}, 0.0
    t0 = time.time()
    tables = build_tables(datasets, n, epochs, seed, workers)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"{d}_{k}": tables[d][k] for d in datasets for k in ("val", "test", "val_err", "test_err")}
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, key=np.array(key), configs=np.array(json.dumps(tables[datasets[0]]["configs"])),
                        **arrays)
    tmp.replace(path)
    return tables, time.time() - t0


_TABLES: dict[str, dict] = {}


def _worker_tables(path: str, datasets: list[str], n: int, epochs: int, seed: int) -> dict[str, dict]:
    if not _TABLES:
        _TABLES.update(load_tables(Path(path), datasets, n, epochs, seed, 1)[0])
    return _TABLES


# ------------------------------------------------------------------ pruners
class _None:
    def start(self, number: int, idx: int) -> None:
        pass

    def report(self, number: int, step: int, value: float) -> bool:
        return False

    def complete(self, number: int, step: int, value: float) -> None:
        """The last epoch's report: the run is complete (no pruner is asked)."""

    def stats(self) -> dict[str, Any]:
        return {}


class _Calibo(_None):
    """calibo's pure ``decide`` on the curves of every trial so far."""

    def __init__(self, name: str, epochs: int, seed: int) -> None:
        from calibo.engine.pruning import PrunerConfig

        spec: dict[str, Any] = {"name": name, "min_resource": 1, "max_resource": epochs,
                                "reduction_factor": REDUCTION}
        if name == "median":
            spec.update(n_startup_trials=5, n_warmup_steps=0)
        self.cfg = PrunerConfig.from_any(spec)
        self.seed = seed
        self.curves: dict[int, Any] = {}
        self.rungs: list[tuple[int, int, int, bool]] = []  # (rung, competitors, kept, pruned)

    def start(self, number: int, idx: int) -> None:
        from calibo.engine.pruning import Curve

        self.curves[number] = Curve(number, "running", {})

    def report(self, number: int, step: int, value: float) -> bool:
        from calibo.engine.pruning import decide

        c = self.curves[number]
        c.values[step] = value
        d = decide(self.cfg, "minimize", number, step, list(self.curves.values()), seed=self.seed)
        if d.rung is not None:
            self.rungs.append((d.rung, d.competitors, int(d.kept or 0), bool(d.should_prune)))
        if d.should_prune:
            c.state = "pruned"
        return bool(d.should_prune)

    def complete(self, number: int, step: int, value: float) -> None:
        c = self.curves[number]
        c.values[step] = value
        c.state = "complete"

    def stats(self) -> dict[str, Any]:
        """Per rung: decisions, mean competitors, mean kept, mean kept / competitors, share pruned."""
        out: dict[str, Any] = {}
        for r in sorted({r for r, *_ in self.rungs}):
            rows = [(n, k, p) for rr, n, k, p in self.rungs if rr == r]
            n, k, p = (np.array(x, float) for x in zip(*rows, strict=True))
            out[str(r)] = {"decisions": len(rows), "competitors": float(n.mean()), "kept": float(k.mean()),
                           "kept_fraction": float(np.mean(k / np.maximum(n, 1))), "pruned_share": float(p.mean())}
        return {"rungs": out}


class _Optuna(_None):
    """A real in-memory Optuna study; the configuration sequence is enqueued."""

    def __init__(self, name: str, epochs: int, seed: int, study_name: str, n_configs: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        pruner = {"optuna_median": lambda: optuna.pruners.MedianPruner(),
                  "optuna_sh": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=1,
                                                                              reduction_factor=REDUCTION),
                  "optuna_hb": lambda: optuna.pruners.HyperbandPruner(min_resource=1, max_resource=epochs,
                                                                      reduction_factor=REDUCTION)}[name]()
        self.study = optuna.create_study(direction="minimize", study_name=study_name, pruner=pruner,
                                         sampler=optuna.samplers.RandomSampler(seed=seed))
        self.n_configs = n_configs
        self.trials: dict[int, Any] = {}

    def start(self, number: int, idx: int) -> None:
        self.study.enqueue_trial({"idx": idx})
        trial = self.study.ask()
        got = trial.suggest_int("idx", 0, self.n_configs - 1)
        if trial.number != number or got != idx:
            raise RuntimeError(f"optuna trial {trial.number} got configuration {got}, expected {number}: {idx}")
        self.trials[number] = trial

    def report(self, number: int, step: int, value: float) -> bool:
        from optuna.trial import TrialState

        trial = self.trials[number]
        trial.report(value, step)
        if trial.should_prune():
            self.study.tell(trial, state=TrialState.PRUNED)
            del self.trials[number]
            return True
        return False

    def complete(self, number: int, step: int, value: float) -> None:
        trial = self.trials.pop(number)
        trial.report(value, step)
        self.study.tell(trial, value)


def make_pruner(method: str, epochs: int, seed: int, dataset: str, n_configs: int):
    if method == "none":
        return _None()
    if method in CALIBO:
        return _Calibo(method, epochs, seed)
    if method in OPTUNA:
        return _Optuna(method, epochs, seed, f"multifidelity-{dataset}-{seed}", n_configs)
    raise ValueError(f"unknown method {method!r}")


# --------------------------------------------------------------- simulation
def config_order(seed: int, n: int, count: int) -> np.ndarray:
    """The configurations in the order a seed draws them (the same for every method)."""
    rng = np.random.default_rng([seed, 0x4D46])
    return np.concatenate([rng.permutation(n) for _ in range(-(-count // n))])[:count]


def simulate(method: str, table: dict, dataset: str, seed: int, in_flight: int, budget: int) -> dict[str, Any]:
    """One run; ``budget`` in epochs. Returns regret at every GRID fraction of the budget and run statistics."""
    val, test = table["val"], table["test"]
    n, epochs = val.shape
    final = val[:, -1]
    best, best_test = float(final.min()), float(test.min())
    order = config_order(seed, n, budget)  # never more trials than epochs
    pruner = make_pruner(method, epochs, seed, dataset, n)
    workers: list[list[int] | None] = [None] * in_flight  # [trial number, table index, last step]
    started = completed = pruned = spent = 0
    last: dict[int, tuple[int, float]] = {}  # trial number -> (table index, value at its last step)
    inc_complete: int | None = None  # table index of the best completed trial
    returned = np.zeros(budget + 1, dtype=int)  # after b epochs
    marks = sorted({int(round(f * budget)) for f in GRID})
    while spent < budget:
        for w in range(in_flight):
            if spent >= budget:
                break
            if workers[w] is None:
                workers[w] = [started, int(order[started]), 0]
                pruner.start(started, int(order[started]))
                started += 1
            job = workers[w]
            number, idx = job[0], job[1]
            job[2] += 1
            step = job[2]
            spent += 1
            v = float(val[idx, step - 1])
            last[number] = (idx, v)
            if step == epochs:
                pruner.complete(number, step, v)
                completed += 1
                if inc_complete is None or final[idx] < final[inc_complete]:
                    inc_complete = idx
                workers[w] = None
            elif pruner.report(number, step, v):
                pruned += 1
                workers[w] = None
            if spent in marks:
                if inc_complete is not None:
                    returned[spent] = inc_complete
                else:
                    returned[spent] = min(last.values(), key=lambda t: t[1])[0]
    ret = [int(returned[int(round(f * budget))]) for f in GRID]
    return {"regret": [float(final[i] - best) for i in ret], "test_regret": [float(test[i] - best_test) for i in ret],
            "returned": ret, "started": started, "completed": completed, "pruned": pruned,
            "running_at_end": sum(w is not None for w in workers), **pruner.stats()}


def run_one(job: tuple) -> dict[str, Any]:
    method, dataset, seed, in_flight, budget, table_args = job
    tables = _worker_tables(*table_args)
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's ExperimentalWarning and the like
        res = simulate(method, tables[dataset], dataset, seed, in_flight, budget)
    return {"method": method, "dataset": dataset, "seed": seed, **res,
            "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


# ------------------------------------------------------------------ analysis
def _reaches(curve: np.ndarray, target: float) -> float | None:
    """The first budget fraction from which ``curve`` stays at or below ``target`` (None: not by 1.0).
    Staying, not touching: before the first completed trial the returned configuration is a noisy guess."""
    above = np.flatnonzero(curve > target + 1e-12)
    if not above.size:
        return float(GRID[0])
    return None if above[-1] == len(curve) - 1 else float(GRID[above[-1] + 1])


def _sign_test(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    from scipy.stats import binomtest

    wins, losses = int(np.sum(a < b - 1e-12)), int(np.sum(a > b + 1e-12))
    p = float(binomtest(wins, wins + losses, 0.5).pvalue) if wins + losses else 1.0
    return {"n": len(a), "wins": wins, "losses": losses, "ties": len(a) - wins - losses, "p": p}


def summarize(runs: list[dict], tables: dict[str, dict], tolerance: float) -> dict[str, Any]:
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    methods += sorted({r["method"] for r in runs} - set(methods))
    datasets = [d for d in DATASETS if any(r["dataset"] == d for r in runs)]
    seeds = sorted({r["seed"] for r in runs})
    scale = {}
    for d in datasets:
        final = tables[d]["val"][:, -1]
        scale[d] = float(np.median(final) - final.min())
    by = {(r["method"], r["dataset"], r["seed"]): r for r in runs}

    def mat(m: str, d: str, key: str = "regret") -> np.ndarray:
        return np.array([by[(m, d, s)][key] for s in seeds if (m, d, s) in by])

    curves: dict[str, dict[str, Any]] = {}
    for d in [*datasets, "mean"]:
        curves[d] = {}
        for m in methods:
            if d == "mean":
                if not all((m, dd, s) in by for dd in datasets for s in seeds):
                    continue
                x = np.mean([mat(m, dd) / scale[dd] for dd in datasets], axis=0)  # seeds x grid, normalised
                xt = None
            else:
                x, xt = mat(m, d), mat(m, d, "test_regret")
                if not len(x):
                    continue
            sem = x.std(axis=0, ddof=1) / np.sqrt(len(x)) if len(x) > 1 else np.zeros(x.shape[1])
            curves[d][m] = {"mean": x.mean(axis=0).tolist(), "sem": sem.tolist(), "n": len(x),
                            **({"test_mean": xt.mean(axis=0).tolist()} if xt is not None else {}),
                            **({"normalised_mean": (x.mean(axis=0) / scale[d]).tolist()} if d != "mean" else {})}
    to_target: dict[str, dict[str, Any]] = {}
    for d, cs in curves.items():
        if "sh" not in cs:
            continue
        target = cs["sh"]["mean"][-1]
        to_target[d] = {"target": target, "by_method": {}}
        for m, c in cs.items():
            entry: dict[str, Any] = {"fraction": _reaches(np.array(c["mean"]), target)}
            if d != "mean":  # per seed, each against its own seed's sh final regret
                per = []
                for s in seeds:
                    if (m, d, s) in by and ("sh", d, s) in by:
                        f = _reaches(np.array(by[(m, d, s)]["regret"]), by[("sh", d, s)]["regret"][-1])
                        per.append(np.inf if f is None else f)
                med = float(np.median(per)) if per else None
                entry["per_seed"] = [None if np.isinf(f) else f for f in per]
                entry["per_seed_median"] = None if med is None or np.isinf(med) else med
            to_target[d]["by_method"][m] = entry
    aims: dict[str, Any] = {}
    if "mean" in to_target and "sh+" in to_target["mean"]["by_method"]:
        f = to_target["mean"]["by_method"]["sh+"]["fraction"]
        aims["sh+_epochs_vs_sh"] = {
            "rule": "first budget fraction from which the dataset-averaged normalised mean regret of sh+ "
                    "stays <= sh's at 1.0",
            "fraction": f, "aim": 0.6, "met": f is not None and f <= 0.6,
            "per_dataset": {d: to_target[d]["by_method"]["sh+"]["fraction"] for d in datasets if d in to_target}}
    for ours, theirs in (("sh", "optuna_sh"), ("hb", "optuna_hb"), ("median", "optuna_median")):
        if not all((m, d, s) in by for m in (ours, theirs) for d in datasets for s in seeds):
            continue
        a = np.array([by[(ours, d, s)]["regret"][-1] / scale[d] for d in datasets for s in seeds])
        b = np.array([by[(theirs, d, s)]["regret"][-1] / scale[d] for d in datasets for s in seeds])
        diff = a - b
        aims[f"{ours}_vs_{theirs}"] = {
            "rule": f"mean normalised final regret of {ours} <= {theirs}'s + {tolerance} (over datasets x seeds)",
            "calibo": float(a.mean()), "optuna": float(b.mean()), "mean_diff": float(diff.mean()),
            "sem_diff": float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0,
            "tolerance": tolerance, "met": bool(diff.mean() <= tolerance), "sign_test": _sign_test(a, b),
            "per_dataset": {d: {"calibo": float(np.mean([by[(ours, d, s)]["regret"][-1] for s in seeds])),
                                "optuna": float(np.mean([by[(theirs, d, s)]["regret"][-1] for s in seeds]))}
                            for d in datasets}}
    runs_stats = {d: {m: {k: float(np.mean([by[(m, d, s)][k] for s in seeds if (m, d, s) in by]))
                          for k in ("started", "completed", "pruned", "cpu_s")}
                      for m in methods if any((m, d, s) in by for s in seeds)} for d in datasets}
    keep = {d: {m: _merge_rungs([by[(m, d, s)].get("rungs", {}) for s in seeds if (m, d, s) in by])
                for m in methods if m in CALIBO and m != "median"} for d in datasets}
    tabs = {d: {"best_converged": float(tables[d]["val"][:, -1].min()),
                "median_converged": float(np.median(tables[d]["val"][:, -1])),
                "best_test": float(tables[d]["test"].min()), "normaliser": scale[d],
                "best_config": tables[d]["configs"][int(np.argmin(tables[d]["val"][:, -1]))],
                "best_val_error": float(tables[d]["val_err"][int(np.argmin(tables[d]["val"][:, -1]))]),
                "rank_corr_by_epoch": _rank_corr(tables[d]["val"])} for d in datasets}
    return {"methods": methods, "datasets": datasets, "seeds": seeds, "grid": GRID.tolist(), "tables": tabs,
            "curves": curves, "epochs_to_target": to_target, "aims": aims, "runs": runs_stats,
            "keep_counts": keep}


def _rank_corr(val: np.ndarray) -> dict[str, float]:
    """Spearman correlation of the validation loss at epoch t with the converged one (how hard pruning is)."""
    from scipy.stats import spearmanr

    e = val.shape[1]
    return {str(t): float(spearmanr(val[:, t - 1], val[:, -1]).statistic) for t in (1, 3, 9, e) if t <= e}


def _merge_rungs(per_run: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in sorted({k for p in per_run for k in p}, key=int):
        rows = [p[r] for p in per_run if r in p]
        w = np.array([x["decisions"] for x in rows], float)
        out[r] = {"decisions": int(w.sum()), **{k: float(np.average([x[k] for x in rows], weights=w))
                                                for k in ("competitors", "kept", "kept_fraction", "pruned_share")}}
    return out


# -------------------------------------------------------------------- output
def _f(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def print_tables(summary: dict) -> None:
    idx = [int(round(f * 100)) - 1 for f in TABLE_AT]
    tt = summary["epochs_to_target"]
    for d in [*summary["datasets"], "mean"]:
        cs = summary["curves"][d]
        unit = ("validation log loss regret" if d != "mean"
                else "normalised regret (regret / (median - best converged loss)), mean over datasets")
        print(f"\n{d}: mean {unit} over {len(summary['seeds'])} seeds (sem) at budget fraction; "
              f"epochs to reach sh's final regret (fraction of the budget; mean curve / per-seed median)")
        if d != "mean":
            t = summary["tables"][d]
            print(f"  table: best converged {t['best_converged']:.4f}, median {t['median_converged']:.4f}; "
                  f"Spearman(val@t, val@E): "
                  + ", ".join(f"t={k}: {v:.2f}" for k, v in t["rank_corr_by_epoch"].items()))
        print(f"{'method':<15}" + "".join(f"{'@' + str(f):>17}" for f in TABLE_AT) + f"{'to sh@1':>10}{'seeds':>8}")
        for m, c in cs.items():
            e = tt.get(d, {}).get("by_method", {}).get(m, {})
            print(f"{m:<15}" + "".join(f"{c['mean'][i]:>9.4f} ({c['sem'][i]:.4f})" for i in idx)
                  + f"{_f(e.get('fraction')):>10}{_f(e.get('per_seed_median')):>8}")
    print("\nruns (mean per run over seeds): trials started / completed / pruned, cpu seconds")
    for d, ms in summary["runs"].items():
        for m, s in ms.items():
            print(f"  {d:<14}{m:<15}{s['started']:>7.1f}{s['completed']:>7.1f}{s['pruned']:>7.1f}{s['cpu_s']:>8.2f}")
    print("\nkeep counts of calibo's rung pruners (per rung: decisions, mean competitors, mean kept, "
          "mean kept/competitors, share pruned)")
    for d, ms in summary["keep_counts"].items():
        for m, rs in ms.items():
            print(f"  {d:<14}{m:<5} " + "  ".join(
                f"r{r}: {x['decisions']} {x['competitors']:.1f} {x['kept']:.1f} {x['kept_fraction']:.2f} "
                f"{x['pruned_share']:.2f}" for r, x in rs.items()))
    print("\naims")
    for k, a in summary["aims"].items():
        if k == "sh+_epochs_vs_sh":
            print(f"  sh+ epochs to sh's final regret: {_f(a['fraction'])} of sh's (aim <= {a['aim']}): "
                  f"{'MET' if a['met'] else 'NOT MET'}; per dataset "
                  + ", ".join(f"{d} {_f(v)}" for d, v in a["per_dataset"].items()))
        else:
            st = a["sign_test"]
            print(f"  {k}: normalised final regret {a['calibo']:.4f} vs {a['optuna']:.4f} (diff {a['mean_diff']:+.4f}"
                  f" +- {a['sem_diff']:.4f} sem, tolerance {a['tolerance']}): {'MET' if a['met'] else 'NOT MET'};"
                  f" sign test W/L/T {st['wins']}/{st['losses']}/{st['ties']} p={st['p']:.3g}")


STYLE = {"none": ("k", ":"), "median": ("tab:green", "-"), "sh": ("tab:blue", "-"), "hb": ("tab:orange", "-"),
         "sh+": ("tab:purple", "-"), "hb+": ("tab:red", "-"), "optuna_median": ("tab:green", "--"),
         "optuna_sh": ("tab:blue", "--"), "optuna_hb": ("tab:orange", "--")}


def plot(summary: dict, path: Path) -> None:
    panels = [*summary["datasets"], "mean"]
    fig, grid_axes = report.figure(1, len(panels) + 1, (4.8, 4.4))
    axes = grid_axes[0]
    grid = np.array(summary["grid"])
    for ax, d in zip(axes, panels, strict=False):
        cs = summary["curves"][d]
        for m, c in cs.items():
            color, ls = STYLE.get(m, ("gray", "-."))
            mean, sem = np.array(c["mean"]), np.array(c["sem"])
            ax.plot(grid, mean, color=color, ls=ls, lw=2.2 if m in ("sh+", "hb+") else 1.2, label=m)
            ax.fill_between(grid, mean - sem, mean + sem, color=color, alpha=0.06)
        if "sh" in cs:
            ax.axhline(cs["sh"]["mean"][-1], color="tab:blue", lw=0.6, alpha=0.6)
        later = [v for c in cs.values() for v in c["mean"][int(0.15 * len(grid)):]]
        ax.set_ylim(0, 1.15 * max(later) if later and max(later) > 0 else None)  # zoom past the first guesses
        ax.set_xlabel("budget fraction (epochs / budget)")
        ax.set_title(f"{d}: mean regret ({len(summary['seeds'])} seeds)" if d != "mean"
                     else "mean over datasets: normalised regret", fontsize=9)
    axes[0].set_ylabel("regret of the returned configuration (val log loss at E)")
    axes[0].legend(fontsize=7)
    ax = axes[-1]
    tt = summary["epochs_to_target"]
    methods = summary["methods"]
    width = 0.8 / len(panels)
    for k, d in enumerate(panels):
        if d not in tt:
            continue
        vals = [tt[d]["by_method"].get(m, {}).get("fraction") for m in methods]
        xs = np.arange(len(methods)) + (k - (len(panels) - 1) / 2) * width
        ax.bar(xs, [1.05 if v is None else v for v in vals], width, label=d,
               hatch=None, alpha=0.85)
        for x, v in zip(xs, vals, strict=True):
            if v is None:
                ax.text(x, 1.06, ">1", ha="center", fontsize=6)
    ax.axhline(0.6, color="tab:purple", ls="--", lw=0.8)
    ax.set_xticks(np.arange(len(methods)), methods, rotation=45, ha="right", fontsize=8)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("budget fraction to reach sh's final mean regret")
    ax.set_title("epochs to sh's final regret (dashed: sh+ aim 0.6)", fontsize=9)
    ax.legend(fontsize=7)
    report.save_figure(fig, path)


def _meta_code() -> dict[str, Any]:
    git = ["git", "-C", str(ROOT)]
    try:
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "service/engine/pruning.py",
                                "benchmarks/multifidelity.py"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except Exception:  # no git: the run still counts
        return {}
    return {"git_commit": commit, "uncommitted_changes": dirty.splitlines()}


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for pkg in ("calibo", "optuna", "numpy", "scipy", "scikit-learn"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--configs", type=int, default=500, help="configurations per curve table")
    ap.add_argument("--epochs", type=int, default=27, help="E: epochs of a complete run (max_resource)")
    ap.add_argument("--budget", type=int, default=30, help="total budget in units of E epochs")
    ap.add_argument("--in-flight", type=int, default=4, help="W asynchronous workers")
    ap.add_argument("--table-seed", type=int, default=0)
    ap.add_argument("--tolerance", type=float, default=0.02,
                    help="'not worse than Optuna': normalised final regret at most this much above")
    ap.add_argument("--cache", default=str(CACHE), help="curve tables cache (.npz)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the curve tables even when cached")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(report.RESULTS / "multifidelity.json"))
    args = ap.parse_args(argv)
    methods = args.methods.split(",")
    datasets = args.datasets.split(",")
    bad = [m for m in methods if m not in METHODS] + [d for d in datasets if d not in DATASETS]
    if bad:
        raise SystemExit(f"unknown {bad}: methods {', '.join(METHODS)}; datasets {', '.join(DATASETS)}")
    t0 = time.time()
    tables, build_s = load_tables(Path(args.cache), datasets, args.configs, args.epochs, args.table_seed,
                                  args.workers, args.rebuild)
    how = f"built in {build_s:.0f} s" if build_s else "cached"
    print(f"curve tables: {args.configs} configurations x {args.epochs} epochs on {', '.join(datasets)} "
          f"({how}: {args.cache})")
    budget = args.budget * args.epochs
    table_args = (args.cache, datasets, args.configs, args.epochs, args.table_seed)
    jobs = [(m, d, s, args.in_flight, budget, table_args)
            for s in range(args.seed_offset, args.seed_offset + args.seeds) for d in datasets for m in methods]
    jobs.sort(key=lambda j: (j[0] not in SLOW, SLOW.index(j[0]) if j[0] in SLOW else 0))  # slowest first
    t1 = time.time()
    runs = runner.run_pool(run_one, [(j,) for j in jobs], args.workers, "multifidelity runs")
    sim_s = time.time() - t1
    summary = summarize(runs, tables, args.tolerance)
    print_tables(summary)
    meta = {"args": vars(args), "budget_epochs": budget, "metric": "validation log loss (MLPClassifier, adam)",
            "regret": "val log loss at E of the returned configuration minus the table's best (test: test_regret)",
            "code": _meta_code(), "versions": _versions(), "cpu_count": os.cpu_count(),
            "platform": platform.platform(), "loadavg_at_start": os.getloadavg(), "table_build_s": build_s,
            "simulation_s": sim_s, "wall_seconds": time.time() - t0}
    out = report.write_json(args.out, {"meta": meta, "summary": summary, "runs": runs})
    plot(summary, out.with_suffix(".png"))
    print(f"\n{len(runs)} runs in {sim_s:.0f} s (tables {build_s:.0f} s); wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
