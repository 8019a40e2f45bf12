"""Service settings from the environment (``CALIBO_*``), via pydantic-settings."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_workers() -> int:
    # One fit process per two cores, at least one: the API and the database
    # need the rest.
    return max(1, (os.cpu_count() or 2) // 2)


class Settings(BaseSettings):
    """Every field can be set as ``CALIBO_<NAME>`` (e.g. ``CALIBO_DATABASE_URL``)."""

    model_config = SettingsConfigDict(env_prefix="CALIBO_", extra="ignore")

    database_url: str = Field(
        default="sqlite:///./calibo.db",
        description="SQLAlchemy URL: sqlite:///path.db (default) or postgresql://user@host/db",
    )
    workers: int = Field(
        default_factory=_default_workers, ge=0,
        description="fit processes in the local pool; 0 runs fits on a thread of the API process",
    )
    worker_mode: Literal["pool", "queue"] = Field(
        default="pool", description="where refits run: pool (a process pool inside `calibo serve`, the default) or "
        "queue (a PostgreSQL job queue that `calibo worker` processes take them from: a cluster)",
    )
    worker_concurrency: int = Field(default=1, ge=1, le=64, description="fits one `calibo worker` runs at a time")
    worker_heartbeat_seconds: float = Field(
        default=10.0, gt=0, le=600,
        description="how often a `calibo worker` says it is alive and looks for stalled jobs")
    worker_stalled_seconds: float = Field(
        default=30.0, gt=0, le=3600, description="a fit job whose worker sent no heartbeat for this long is queued "
        "again (its worker died or froze); must exceed worker_heartbeat_seconds",
    )
    worker_alive_file: str = Field(
        default="/tmp/calibo-worker.alive", description="file a `calibo worker` touches every heartbeat; "
        "`calibo worker --check` (the container healthcheck) reads it",
    )
    worker_metrics_port: int | None = Field(
        default=None, ge=1, le=65535, description="a `calibo worker` serves its fit metrics to Prometheus on this port")
    ask_wait_seconds: float = Field(
        default=5.0, ge=0, le=600,
        description="default bound on how long an ask waits for a fit covering the latest tells "
        "(studies override it with settings.ask_wait_seconds)",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="where fits of torch surrogates run: auto (CUDA when torch sees a GPU), cpu, "
        "or cuda (the CPU, with the reason logged, when there is none or a CUDA error occurs)",
    )
    fit_retries: int = Field(default=3, ge=0,
                             description="retries of a crashed fit before giving up until the next tell")
    api_tokens: str = Field(
        default="", description="comma-separated `token` or `token:role` (role write, the default, or read); "
        "empty disables auth",
    )
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    log_format: Literal["text", "json"] = Field(
        default="text", description="text lines, or JSON lines (one object per line: ts, level, logger, message, "
        "request_id and the line's fields)")
    access_log: bool = Field(default=False,
                             description="one log line per request: method, path, status, duration, request id")
    snapshot_cache: int = Field(default=64, ge=1, description="snapshots kept deserialised in memory")
    study_cache: int = Field(default=1024, ge=1, description="studies whose parsed definitions and finished trials' "
                             "keys are kept in memory (the most recently used)")
    migrate: bool = Field(default=True, description="run `alembic upgrade head` when the app starts")
    heartbeat_timeout_seconds: float = Field(
        default=1800.0, ge=1, le=7 * 86400,
        description="a running trial silent (no heartbeat) for longer is failed by the reaper, unless its "
        "study sets its own settings.heartbeat_timeout_seconds; a late tell of it is still recorded",
    )
    reaper_interval_seconds: float = Field(default=30.0, gt=0, le=3600, description="how often the reaper looks")
    max_body_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576,
                                description="largest request body accepted; larger ones answer 413")
    header_timeout_seconds: float = Field(
        default=10.0, gt=0, le=600, description="a connection whose request headers are not complete this long "
        "after its first byte (or after it opened) is closed",
    )
    body_timeout_seconds: float = Field(
        default=30.0, gt=0, le=3600, description="a request whose body is not complete this long after its headers "
        "answers 408 and the connection is closed",
    )
    keep_alive_seconds: float = Field(default=5.0, gt=0, le=600,
                                      description="idle keep-alive connections are closed after")
    max_connections: int = Field(
        default=1000, ge=1, le=100_000,
        description="open connections (and requests in progress) beyond this answer 503",
    )
    retry_after_seconds: int = Field(default=1, ge=1, le=600,
                                     description="Retry-After of a 503 while the database is down")
    db_timeout_seconds: float = Field(
        default=5.0, gt=0, le=600, description="connecting to the database gives up after this (then 503)",
    )
    docs: bool = Field(default=True, description="serve /docs, /redoc and /openapi.json (without auth)")
    rate_limit: str = Field(
        default="", description="requests to /v1 allowed per token (per client address when auth is off), in the "
        "notation of the limits library: 100/second, or several separated by ';' (20/second;1000/minute); "
        "past it 429 with Retry-After; empty (the default) sets no limit",
    )
    auth_failure_limit: str = Field(
        default="100/minute", description="failed authentications (401) allowed per client address when "
        "auth is on; past it, until the window allows again, a request from that address with a wrong or "
        "missing token is answered 429 with Retry-After, while one with a valid token is still served; empty "
        "turns the throttle off",
    )
    trusted_proxies: str = Field(
        default="", description="comma-separated IP addresses and CIDR networks of the proxies whose X-Forwarded-For "
        "names the client (for the failed-auth throttle, the per-address rate limit and the access log); "
        "empty (the default): X-Forwarded-For is ignored and the connection's address counts",
    )
    rate_limit_storage: str = Field(
        default="memory://", description="where rate-limit counts live: memory:// (this process) or "
        "redis://host:6379 (shared by the API replicas that name it); while it is unreachable requests "
        "are not limited (fail-open, logged)",
    )

    @model_validator(mode="after")
    def _queue_needs_postgres(self) -> Settings:
        if self.worker_mode == "queue" and not self.database_url.startswith("postgresql"):
            raise ValueError("CALIBO_WORKER_MODE=queue needs PostgreSQL (CALIBO_DATABASE_URL=postgresql://...): "
                             "the fit queue lives in the studies' database")
        if self.worker_stalled_seconds <= self.worker_heartbeat_seconds:
            raise ValueError("CALIBO_WORKER_STALLED_SECONDS must exceed CALIBO_WORKER_HEARTBEAT_SECONDS")
        return self

    @field_validator("rate_limit", "auth_failure_limit")
    @classmethod
    def _rate_limit(cls, v: str, info: ValidationInfo) -> str:
        # the notation of the limits library, checked here so that a typo fails at start
        from limits import parse_many

        v = v.strip()
        setting = f"CALIBO_{(info.field_name or '').upper()}"
        if v:
            try:
                items = parse_many(v)
            except ValueError:
                raise ValueError(f"{setting}={v!r} is not a rate limit: write e.g. 100/second, 20/minute, or "
                                 "several separated by ';' (10/second;500/minute); empty turns it off") from None
            if any(item.amount < 1 for item in items):
                raise ValueError(f"{setting}={v!r} allows no request; leave it empty to turn the limit off")
        return v

    @field_validator("trusted_proxies")
    @classmethod
    def _trusted_proxies(cls, v: str) -> str:
        # checked here so that a typo fails at start; api.ratelimit.ForwardedFor reads the checked value
        import ipaddress

        items = [item.strip() for item in v.split(",") if item.strip()]
        for item in items:
            try:
                ipaddress.ip_network(item, strict=True)
            except ValueError as e:
                hint = ("; to trust every peer write 0.0.0.0/0,::/0" if item == "*" else
                        f"; a network starts at its first address: {ipaddress.ip_network(item, strict=False)}"
                        if "host bits" in str(e) else "")
                raise ValueError(f"CALIBO_TRUSTED_PROXIES={v!r}: {item!r} is not an IP address or CIDR network "
                                 f"(e.g. 10.0.0.5, 10.0.0.0/8, fd00::/8; comma-separated){hint}") from None
        return ",".join(items)

    @field_validator("rate_limit_storage")
    @classmethod
    def _rate_limit_storage(cls, v: str) -> str:
        import limits.aio.storage  # noqa: F401 - registers the asyncio storages' schemes
        from limits.storage import SCHEMES

        v = v.strip()
        scheme = v.partition("://")[0]
        if "://" not in v or (scheme if scheme.startswith("async+") else "async+" + scheme) not in SCHEMES:
            raise ValueError(f"CALIBO_RATE_LIMIT_STORAGE={v!r} is not a storage the limits library knows: use "
                             "memory:// or redis://host:port")
        return v

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.lower() if isinstance(v, str) else v

    @field_validator("database_url")
    @classmethod
    def _driver(cls, v: str) -> str:
        # psycopg (v3) is the PostgreSQL driver calibo installs
        for prefix in ("postgresql://", "postgres://"):
            if v.startswith(prefix):
                return "postgresql+psycopg://" + v[len(prefix):]
        return v

    def tokens(self) -> dict[str, str]:
        """``{token: role}`` from ``api_tokens``."""
        out: dict[str, str] = {}
        for item in self.api_tokens.split(","):
            item = item.strip()
            if not item:
                continue
            token, _, role = item.partition(":")
            role = role.strip() or "write"
            if role not in ("read", "write"):
                raise ValueError(f"CALIBO_API_TOKENS: role {role!r} must be read or write")
            out[token.strip()] = role
        return out
