"""Print docker/constraints.txt: the exact versions, from a venv where `make venv` installed calibo,
of every package `calibo[server,katib,optuna]` pulls in (the image also serves `calibo katib` and
`calibo optuna-grpc`)
(test/bench-only packages out; torch out, the Dockerfile pins it on its own index).

    .venv/bin/python docker/constraints.py > docker/constraints.txt
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SKIP = {"calibo", "torch"}
EXTRAS = {"server", "katib", "optuna"}  # the Dockerfile's `pip install ".[server,katib,optuna]"`


def closure(root: str, extras: set[str]) -> dict[str, str]:
    pins: dict[str, str] = {}
    todo = [(root, extras)]
    seen: set[tuple[str, str]] = set()
    while todo:
        name, want = todo.pop()
        for extra in want | {""}:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            try:
                dist = distribution(name)
            except PackageNotFoundError:
                continue  # a marker-excluded or optional package this venv lacks
            key = canonicalize_name(dist.metadata["Name"])
            if key not in SKIP:
                pins[key] = f"{dist.metadata['Name']}=={dist.version}"
            for line in dist.requires or []:
                req = Requirement(line)
                if req.marker is None or req.marker.evaluate({"extra": extra}):
                    todo.append((req.name, set(req.extras)))
    return pins


if __name__ == "__main__":
    print("# Exact versions of what `calibo[server,katib,optuna]` installs (torch excluded: the Dockerfile pins it).")
    print("# Regenerate after `make venv`:  .venv/bin/python docker/constraints.py > docker/constraints.txt")
    for _, pin in sorted(closure("calibo", EXTRAS).items()):
        print(pin)
