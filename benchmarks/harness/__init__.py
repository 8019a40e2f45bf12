"""The benchmark harness every suite under ``benchmarks/`` is built on.

* :mod:`.tasks`: the task registry (synthetic functions, model tuning, the real-tuning suite and
  its held-out tasks), with :mod:`.functions` and :mod:`.models` holding the objectives;
* :mod:`.peers`: calibo and its peers (Optuna GP / TPE / NSGA-II, random, SMAC3, ConfOpt) behind
  one ask / tell protocol;
* :mod:`.runner`: the process pool with its progress bar, sequential runs, K trials in flight on a
  virtual clock, and the shared options: seeds, ``--merge``, ``--skip``, ``--resume``;
* :mod:`.report`: tables, compact JSON, PNG figures, ranks and sign tests;
* :mod:`.servers` and :mod:`.timing`: fresh databases, frozen code, ``calibo serve`` processes,
  latency and throughput drivers for the service suites.

A suite runs as a module from the repository root: ``python -m benchmarks.<suite> --help``.
"""
