"""The ``calibo`` command line."""

from __future__ import annotations

import argparse
import math
import sys
import time


def _branin(p: dict) -> float:
    x1, x2 = p["x1"], p["x2"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def demo(args: argparse.Namespace) -> int:
    """Minimise Branin in-process and show each suggestion with its calibrated interval."""
    from service.engine import Optimizer

    space = {"x1": {"type": "float", "low": -5, "high": 10}, "x2": {"type": "float", "low": 0, "high": 15}}
    opt = Optimizer(space, seed=args.seed, **({"surrogate": args.surrogate} if args.surrogate else {}))
    print(f"calibo demo: Branin (minimum 0.397887), surrogate={opt.config.surrogate}, "
          f"acquisition={opt.config.acquisition}, {args.trials} trials")
    t0 = time.perf_counter()
    for i in range(args.trials):
        s = opt.ask()[0]
        value = _branin(s.params)
        opt.tell(s.params, value)
        pred = s.prediction
        iv = ""
        if pred is not None:
            wide = pred["intervals"][0]
            inside = "in " if wide["lower"] <= value <= wide["upper"] else "OUT"
            iv = (f"  {int(wide['coverage'] * 100)}% [{wide['lower']:8.3f}, {wide['upper']:8.3f}] "
                  f"{inside} ({pred['method']})")
        print(f"{i + 1:4d}  value {value:9.4f}  best {opt.best[1]:8.4f}{iv}")
    dt = time.perf_counter() - t0
    print(f"best {opt.best[1]:.6f} at {opt.best[0]}; {1000 * dt / args.trials:.1f} ms per trial")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="calibo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="run the in-process optimizer on Branin")
    p.add_argument("--trials", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--surrogate", default=None)
    p.set_defaults(func=demo)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
