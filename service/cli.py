"""The ``calibo`` command line."""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from typing import Any

# what `pip install calibo` (the client alone) lacks for the server commands
SERVER_MODULES = {"fastapi", "uvicorn", "pydantic", "pydantic_settings", "sqlalchemy", "alembic", "psycopg",
                  "numpy", "scipy", "sklearn", "lightgbm", "torch", "threadpoolctl", "procrastinate"}


def _branin(p: dict) -> float:
    x1, x2 = p["x1"], p["x2"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def _at_least_one(text: str) -> int:
    """A count of trials: an integer of at least 1 (argparse's error otherwise)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def demo(args: argparse.Namespace) -> int:
    """Minimise Branin in-process and show each suggestion with its calibrated interval."""
    from calibo.engine import Optimizer

    space = {"x1": {"type": "float", "low": -5, "high": 10}, "x2": {"type": "float", "low": 0, "high": 15}}
    opt = Optimizer(space, seed=args.seed, **({"surrogate": args.surrogate} if args.surrogate else {}))
    print(f"calibo demo: Branin (minimum 0.397887), surrogate={opt.config.surrogate}, "
          f"acquisition={opt.config.acquisition}, {args.trials} trials")
    t0 = time.perf_counter()
    for i in range(args.trials):
        s = opt.ask()[0]
        value = _branin(s.params)
        opt.tell(s.params, value)
        best = opt.best
        assert best is not None  # a finite value was just told
        pred = s.prediction
        iv = ""
        if pred is not None:
            wide = pred["intervals"][0]
            lo, hi = wide["lower"], wide["upper"]  # None: unbounded on that side
            inside = "in " if (lo is None or lo <= value) and (hi is None or value <= hi) else "OUT"
            ends = ("    -inf" if lo is None else f"{lo:8.3f}", "     inf" if hi is None else f"{hi:8.3f}")
            iv = f"  {int(wide['coverage'] * 100)}% [{ends[0]}, {ends[1]}] {inside} ({pred['method']})"
        print(f"{i + 1:4d}  value {value:9.4f}  best {best[1]:8.4f}{iv}")
    dt = time.perf_counter() - t0
    best = opt.best
    assert best is not None  # --trials is at least 1: a trial was told
    print(f"best {best[1]:.6f} at {best[0]}; {1000 * dt / args.trials:.1f} ms per trial")
    return 0


def _settings(args: argparse.Namespace):
    from calibo.server.config import Settings

    over: dict[str, Any] = {k: v for k, v in (("database_url", getattr(args, "database_url", None)),
                                              ("workers", getattr(args, "workers", None)),
                                              ("log_level", getattr(args, "log_level", None)),
                                              ("access_log", getattr(args, "access_log", False) or None))
                            if v is not None}
    return Settings(**over)


def configure_logging(settings) -> None:
    """Text or JSON lines (CALIBO_LOG_FORMAT) at CALIBO_LOG_LEVEL; chatty libraries at warning."""
    import logging

    from calibo.server.logs import configure

    configure(settings.log_level, settings.log_format)
    if settings.log_level != "debug":
        for noisy in ("alembic", "procrastinate"):  # a line per migration step / per deferred fit job
            logging.getLogger(noisy).setLevel(logging.WARNING)


def serve(args: argparse.Namespace) -> int:
    """Run the API (and its local fit pool) under uvicorn."""
    import logging

    import uvicorn

    from calibo.server.app import create_app
    from calibo.server.server import uvicorn_config

    settings = _settings(args)
    configure_logging(settings)
    app = create_app(settings)
    # A request allocates many short-lived objects (ORM rows, JSON): collect the young
    # generation less often (4% of the server's CPU under a crowd went to the collector).
    gc.set_threshold(50_000, 20, 20)
    # select's matrices are small (a few thousand rows by a few dozen): a BLAS thread pool only
    # spin-waits on cores the fits and the database share (a crowd's select measured 2.7x slower).
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")
    shown = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    banner = f"calibo: serving on http://{shown}:{args.port}  (API docs: http://{shown}:{args.port}/docs)"
    if settings.log_format == "json":  # every line of a JSON-lines log is JSON
        logging.getLogger("calibo").info(banner)
    else:
        print(banner, flush=True)
    # uvicorn's loggers go through calibo's handler (text or JSON, with request ids); the access
    # lines are calibo's own (CALIBO_ACCESS_LOG / --access-log), with the request id and duration
    config = uvicorn_config(app, settings, args.host, args.port, log_level=settings.log_level,
                            access_log=False, log_config=None)
    uvicorn.Server(config).run()
    return 0


def worker(args: argparse.Namespace) -> int:
    """Take fit jobs from the cluster's queue until SIGTERM / Ctrl-C (settings from CALIBO_*)."""

    settings = _settings(args)
    if args.check:  # the container healthcheck: did this node's worker pass its watch lately?
        from calibo.server.workers.worker import check_alive

        alive = check_alive(settings.worker_alive_file, 3 * settings.worker_heartbeat_seconds)
        print("calibo worker: " + ("alive" if alive else f"no heartbeat in {settings.worker_alive_file}"))
        return 0 if alive else 1
    if not settings.database_url.startswith("postgresql"):
        print("calibo worker: the fit queue needs PostgreSQL (CALIBO_DATABASE_URL=postgresql://...)",
              file=sys.stderr)
        return 2
    configure_logging(settings)
    from calibo.server.workers.worker import FitWorker

    FitWorker(settings.database_url, concurrency=args.concurrency or settings.worker_concurrency,
              retries=settings.fit_retries, heartbeat=settings.worker_heartbeat_seconds,
              stalled=settings.worker_stalled_seconds, device=settings.device,
              alive_file=settings.worker_alive_file, connect_timeout=settings.db_timeout_seconds,
              migrate=settings.migrate, metrics_port=settings.worker_metrics_port).run()
    return 0


def migrate(args: argparse.Namespace) -> int:
    """Bring the database schema to the newest migration and exit."""
    from calibo.server.storage import make_engine, upgrade

    settings = _settings(args)
    engine = make_engine(settings.database_url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    print(f"calibo: {engine.url.render_as_string(hide_password=True)} is at the newest schema")
    return 0


def katib(args: argparse.Namespace) -> int:
    """Katib's suggestion service (gRPC) over a calibo server, until SIGTERM / Ctrl-C."""
    import logging

    try:
        from calibo.katib import serve as serve_katib
    except ImportError as e:
        print(f"calibo katib: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve_katib(args.url, args.token, host=args.host, port=args.port)
    return 0


# what Optuna's gRPC storage proxy needs beyond calibo's client: the optuna extra
OPTUNA_MODULES = {"optuna", "grpc", "google"}
OPTUNA_GRPC_GRACE = 10.0  # seconds the calls in flight get to finish after SIGTERM / Ctrl-C


def optuna_grpc(args: argparse.Namespace) -> int:
    """Optuna's gRPC storage proxy over a calibo server (``calibo.optuna.CaliboStorage``), until
    SIGTERM / Ctrl-C: Optuna workers anywhere use ``optuna.storages.GrpcStorageProxy(host, port)``."""
    import logging
    import os

    from calibo._signals import wait_for_stop

    try:
        import grpc  # noqa: F401 - optuna imports it lazily, at the first call: fail here instead
        from google.protobuf import runtime_version  # noqa: F401 - as grpc: optuna's messages need it
        from optuna.storages._grpc.server import make_server

        from calibo.optuna import CaliboStorage
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in OPTUNA_MODULES:
            raise  # a server module: main() names the server extra
        print(f"calibo optuna-grpc: {e}. Optuna's gRPC proxy needs the optuna extra (optuna, grpcio, "
              "protobuf): pip install 'calibo[optuna]'", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("calibo.optuna_grpc")
    url = args.url or os.environ.get("CALIBO_URL") or "http://127.0.0.1:8000"
    token = args.token or os.environ.get("CALIBO_TOKEN") or None
    storage = CaliboStorage(url, token=token)
    # optuna.storages.run_grpc_proxy_server(storage, host=, port=) is make_server + start +
    # wait_for_termination, with no way to stop it: the server itself, so that SIGTERM (a container
    # stop) lets the calls in flight finish (a trial told as the pod stops is not lost)
    try:
        server = make_server(storage, args.host, args.port)
    except RuntimeError as e:  # grpc: "Failed to bind to address ..."
        print(f"calibo optuna-grpc: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    server.start()
    log.info("Optuna gRPC storage proxy on %s:%s over the calibo server %s", args.host, args.port, url)
    try:
        wait_for_stop()
    finally:
        log.info("stopping: calls in flight get %.0f s", OPTUNA_GRPC_GRACE)
        server.stop(OPTUNA_GRPC_GRACE).wait()
    return 0


# what optuna-dashboard over calibo needs beyond calibo's client: the optuna-dashboard extra
DASHBOARD_MODULES = {"optuna", "optuna_dashboard", "bottle"}
# the dashboard's writes (notes, rename, delete, create, tell): every method but these, with --read-only
READ_METHODS = {"GET", "HEAD", "OPTIONS"}


def _read_only(app: Any) -> Any:
    """``app`` (WSGI) refusing every request that writes, with a reason the dashboard shows."""
    import json

    body = json.dumps({"reason": "this dashboard is read-only (calibo optuna-dashboard --read-only)"}).encode()

    def refuse_writes(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("REQUEST_METHOD", "GET").upper() in READ_METHODS:
            return app(environ, start_response)
        start_response("403 Forbidden", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return refuse_writes


def optuna_dashboard(args: argparse.Namespace) -> int:
    """optuna-dashboard over a calibo server (``calibo.optuna.CaliboStorage``), until SIGTERM / Ctrl-C."""
    import logging
    import os
    import threading
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    try:
        import optuna_dashboard as dashboard

        from calibo.optuna import CaliboStorage
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in DASHBOARD_MODULES:
            raise  # a server module: main() names the server extra
        print(f"calibo optuna-dashboard: {e}. It needs the optuna-dashboard extra (optuna, optuna-dashboard): "
              "pip install 'calibo[server,optuna-dashboard]'", file=sys.stderr)
        return 2
    from calibo._signals import wait_for_stop
    from calibo.errors import CaliboError

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("calibo.optuna_dashboard")
    if log.getEffectiveLevel() > logging.DEBUG:  # the page polls: a line per REST call only with debug
        logging.getLogger("httpx").setLevel(logging.WARNING)
    url = args.url or os.environ.get("CALIBO_URL") or "http://127.0.0.1:8000"
    token = args.token or os.environ.get("CALIBO_TOKEN") or None
    storage = CaliboStorage(url, token=token)
    # a wrong URL or token is said now, not as a 500 behind every click of the page
    try:
        n = len(storage.get_all_studies())
    except (CaliboError, KeyError) as e:  # KeyError: a 404, what another web server answers /v1/studies
        print(f"calibo optuna-dashboard: cannot list the studies of the calibo server at {url}: {e}",
              file=sys.stderr)
        return 1
    app = dashboard.wsgi(storage)
    if args.read_only:
        app = _read_only(app)

    class Server(ThreadingMixIn, WSGIServer):  # a request at a time would queue the page's behind a slow one
        daemon_threads = True

    class Handler(WSGIRequestHandler):
        def log_message(self, format: str, *a: object) -> None:
            log.debug("%s %s", self.address_string(), format % a)

    try:
        httpd = make_server(args.host, args.port, app, server_class=Server, handler_class=Handler)
    except OSError as e:
        print(f"calibo optuna-dashboard: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    shown = "127.0.0.1" if args.host in ("0.0.0.0", "") else args.host
    log.info("optuna-dashboard on http://%s:%s/dashboard over the calibo server %s (%d studies)%s", shown,
             httpd.server_port, url, n, ", read-only" if args.read_only else "")
    thread = threading.Thread(target=httpd.serve_forever, name="optuna-dashboard", daemon=True)
    thread.start()
    try:
        wait_for_stop()
    finally:
        log.info("stopping")
        httpd.shutdown()
        httpd.server_close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="calibo", description="calibo: ask/tell HPO from calibrated surrogates")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run the REST service (settings from CALIBO_* variables)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--database-url", default=None, help="overrides CALIBO_DATABASE_URL")
    p.add_argument("--workers", type=int, default=None, help="fit processes (overrides CALIBO_WORKERS)")
    p.add_argument("--log-level", default=None)
    p.add_argument("--access-log", action="store_true", help="log every request (as CALIBO_ACCESS_LOG=true)")
    p.set_defaults(func=serve)

    p = sub.add_parser("worker", help="take refits from the cluster's PostgreSQL job queue (CALIBO_WORKER_MODE=queue)")
    p.add_argument("--database-url", default=None, help="overrides CALIBO_DATABASE_URL")
    p.add_argument("--concurrency", type=int, default=None, help="fits at a time (overrides CALIBO_WORKER_CONCURRENCY)")
    p.add_argument("--log-level", default=None)
    p.add_argument("--check", action="store_true", help="exit 0 if this node's worker is alive (a healthcheck)")
    p.set_defaults(func=worker)

    p = sub.add_parser("migrate", help="upgrade the database schema to head and exit")
    p.add_argument("--database-url", default=None, help="overrides CALIBO_DATABASE_URL")
    p.set_defaults(func=migrate)

    p = sub.add_parser("katib", help="serve Katib's suggestion API (gRPC) over a calibo server (the katib extra)")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=6789, help="Katib dials its suggestion services on 6789")
    p.add_argument("--url", default=None, help="the calibo server (default $CALIBO_URL, then http://127.0.0.1:8000)")
    p.add_argument("--token", default=None, help="its API token (default $CALIBO_TOKEN)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=katib)

    p = sub.add_parser("optuna-grpc", help="serve Optuna's gRPC storage proxy over a calibo server, for "
                       "optuna.storages.GrpcStorageProxy (the optuna extra)")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=13000, help="Optuna's own examples use 13000")
    p.add_argument("--url", default=None, help="the calibo server (default $CALIBO_URL, then http://127.0.0.1:8000)")
    p.add_argument("--token", default=None, help="its API token, with the write role (default $CALIBO_TOKEN)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=optuna_grpc)

    p = sub.add_parser("optuna-dashboard", help="serve optuna-dashboard over a calibo server's studies "
                       "(the optuna-dashboard extra)")
    p.add_argument("--host", default="127.0.0.1", help="the address it listens on (the page has no authentication)")
    p.add_argument("--port", type=int, default=8080, help="optuna-dashboard's own default")
    p.add_argument("--url", default=None, help="the calibo server (default $CALIBO_URL, then http://127.0.0.1:8000)")
    p.add_argument("--token", default=None, help="its API token (default $CALIBO_TOKEN): read, or write for "
                   "the page's notes and edits")
    p.add_argument("--read-only", action="store_true", help="refuse the page's writes (notes, rename, delete, "
                   "create, tell) with 403")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="debug logs every request")
    p.set_defaults(func=optuna_dashboard)

    p = sub.add_parser("demo", help="run the in-process optimizer on Branin")
    p.add_argument("--trials", type=_at_least_one, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--surrogate", default=None)
    p.set_defaults(func=demo)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in SERVER_MODULES:
            raise
        print(f"calibo {args.command}: {e}. The server needs its extra: pip install 'calibo[server]'",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
