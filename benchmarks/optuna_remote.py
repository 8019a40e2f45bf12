"""Four Optuna processes on one RDB study: CaliboSampler's remote mode beside its local mode and TPE.

Each cell runs 4 processes x 50 trials of unchanged Optuna code (``optuna.load_study(...)
.optimize``) on one SQLite RDB study, 4 trials in flight; only the sampler line differs:

* ``remote``: ``CaliboSampler(url=...)`` against one ``calibo serve`` (1 fit worker);
* ``local``: ``CaliboSampler()``, each process fitting its own surrogate on the shared trials;
* ``tpe``: ``TPESampler(multivariate=True, group=True)``.

Reported per mode: distinct configurations among the trials the sampler chose (duplicate
suggestions), fits (remote: the server study's snapshot versions; local: the engine fits summed
over the 4 processes) and the CPU seconds the worker processes spent in them, wall seconds, and
the best value after 200 trials.

    python -m benchmarks.optuna_remote --seeds 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.report import colors, figure, print_table, save_figure, write_json, wrote
from benchmarks.harness.servers import calibo_server, database

OUT = Path(__file__).parent / "results" / "optuna_remote.json"
ROOT = Path(__file__).resolve().parent.parent
MODES = ["remote", "local", "tpe"]
PROCESSES, PER_PROCESS = 4, 50

WORKER = textwrap.dedent('''
    import json, sys, time
    import optuna
    import calibo.optuna._sampler as local
    from calibo.optuna import CaliboSampler
    from benchmarks.optuna_conditional import svc_breast_cancer, switched_branin

    storage_url, mode, url, task, seed, n, out, index = sys.argv[1:9]
    spent = {"fits": 0, "cpu": 0.0}
    engine_fit = local.fit

    def counted(*a, **k):
        t0 = time.process_time()
        try:
            return engine_fit(*a, **k)
        finally:
            spent["fits"] += 1
            spent["cpu"] += time.process_time() - t0

    local.fit = counted
    if mode == "tpe":
        # each process its own stream
        sampler = optuna.samplers.TPESampler(multivariate=True, group=True, seed=100 * int(seed) + int(index))
    elif mode == "local":
        sampler = CaliboSampler(seed=int(seed), warn_independent_sampling=False)
    else:
        sampler = CaliboSampler(url=url, seed=int(seed), warn_independent_sampling=False,
                                study_name=f"bench-{task}-{seed}")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = optuna.storages.RDBStorage(storage_url, engine_kwargs={"connect_args": {"timeout": 120}})
    study = optuna.load_study(study_name="shared", storage=storage, sampler=sampler)
    objective = {"svc_breast_cancer": svc_breast_cancer, "switched_branin": switched_branin}[task]
    study.optimize(objective, n_trials=int(n))
    with open(out, "w") as f:
        json.dump(spent, f)
''')


def run_cell(mode: str, task: str, seed: int, url: str | None, tmp: Path) -> dict[str, Any]:
    import httpx
    import optuna

    storage = f"sqlite:///{tmp / f'{mode}-{task}-{seed}.db'}"
    optuna.create_study(study_name="shared", storage=storage)
    script = tmp / "worker.py"
    script.write_text(WORKER)
    outs = [tmp / f"{mode}-{task}-{seed}-{i}.json" for i in range(PROCESSES)]
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, str(script), storage, mode, url or "-", task, str(seed),
                               str(PER_PROCESS), str(o), str(i)], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i, o in enumerate(outs)]
    logs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - t0
    if any(p.returncode for p in procs):
        raise RuntimeError("\n".join(logs)[-3000:])
    spent = [json.loads(o.read_text()) for o in outs]
    trials = optuna.load_study(study_name="shared", storage=storage).trials
    values = [t.value for t in trials if t.value is not None]
    keys = [json.dumps(t.params, sort_keys=True) for t in trials]
    row: dict[str, Any] = {"mode": mode, "task": task, "seed": seed, "trials": len(trials), "wall_seconds": wall,
                           "best": float(min(values)), "distinct": len(set(keys)),
                           "worker_fits": sum(s["fits"] for s in spent),
                           "worker_fit_cpu_seconds": sum(s["cpu"] for s in spent)}
    if mode == "remote":
        # one server study per Optuna study, named by study_name= (server_fits: fits of its final space)
        studies = httpx.get(f"{url}/v1/studies",
                            params={"limit": 1000, "name": f"bench-{task}-{seed}"}).json()["studies"]
        views = [httpx.get(f"{url}/v1/studies/{s['id']}").json() for s in studies]
        suggested = [json.dumps(json.loads(t.system_attrs["calibo:remote"])["params"], sort_keys=True)
                     for t in trials if "calibo:remote" in t.system_attrs]
        row.update(server_studies=len(views), suggested=len(suggested), suggested_distinct=len(set(suggested)),
                   server_fits=sum(v["surrogate_status"]["snapshot_version"] or 0 for v in views),
                   server_results=sum(v["trials"].get("complete", 0) for v in views))
    return row


def main() -> None:
    from tqdm import tqdm

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--tasks", default="switched_branin,svc_breast_cancer")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    tasks = args.tasks.split(",")
    rows: list[dict[str, Any]] = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with database("sqlite", tmp, "remote") as db, calibo_server(db, tmp, "remote", workers=1) as (url, _, _):
            cells = [(m, t, s) for t in tasks for s in range(args.seeds) for m in MODES]
            for mode, task, seed in tqdm(cells, desc="optuna remote"):
                rows.append(run_cell(mode, task, seed, url, tmp))
    table = []
    for mode in MODES:
        rs = [r for r in rows if r["mode"] == mode]
        table.append([mode, float(np.mean([r["wall_seconds"] for r in rs])),
                      sum(r["trials"] - r["distinct"] for r in rs),
                      float(np.mean([r.get("server_fits", 0) for r in rs])),
                      float(np.mean([r["worker_fits"] for r in rs])),
                      float(np.mean([r["worker_fit_cpu_seconds"] for r in rs])),
                      *[float(np.mean([r["best"] for r in rs if r["task"] == t])) for t in tasks]])
    print_table(f"{PROCESSES} processes x {PER_PROCESS} trials on one RDB study ({PROCESSES} in flight), "
                f"{args.seeds} seeds, mean per cell",
                ["mode", "wall s", "dup params", "server fits", "worker fits", "worker fit CPU s",
                 *[f"best {t[:10]}" for t in tasks]], table, width=17, digits=3)
    meta = {"processes": PROCESSES, "trials_per_process": PER_PROCESS, "in_flight": PROCESSES,
            "seeds": args.seeds, "tasks": tasks, "wall_seconds": time.time() - t0}
    write_json(args.out, {"meta": meta, "rows": rows})
    fig, axes = figure(1, 2, size=(5.0, 3.6))
    col = colors(MODES)
    axes[0][0].bar(MODES, [r[4] + r[3] for r in table], color=[col[m] for m in MODES])
    axes[0][0].set_title("fits per 200-trial run (server + workers)")
    axes[0][1].bar(MODES, [r[1] for r in table], color=[col[m] for m in MODES])
    axes[0][1].set_title(f"wall seconds ({PROCESSES} in flight)")
    save_figure(fig, args.out.with_suffix(".png"))
    wrote(args.out, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
