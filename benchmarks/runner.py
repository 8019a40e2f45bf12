"""The process pool every benchmark runs its independent runs in, with a progress bar."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any


def run_pool(fn: Callable[..., dict[str, Any]], jobs: Sequence[tuple], workers: int, desc: str,
             partial: Path | None = None, meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """``fn(*job)`` for every job on ``workers`` processes; the runs that finished, in finishing order.

    A run that crashes is reported on stderr, not fatal. With ``partial``, every tenth finished run
    and the last rewrite it with ``{"meta": meta, "runs": [...]}``, so a run cut off (or a summary
    that fails) still leaves what it did.
    """
    from tqdm import tqdm

    runs: list[dict[str, Any]] = []
    with ProcessPoolExecutor(workers) as pool:
        futs = {pool.submit(fn, *j): j for j in jobs}
        for n, f in enumerate(tqdm(as_completed(futs), total=len(futs), desc=desc), 1):
            try:
                runs.append(f.result())
            except Exception as e:  # one run crashing is reported, not fatal
                print(f"run {futs[f]} failed: {e!r}", file=sys.stderr)
            if partial is not None and (n % 10 == 0 or n == len(futs)):
                partial.write_text(json.dumps({"meta": meta or {}, "runs": runs}))
    return runs
