"""GET /healthz's answer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    database: Literal["ok", "down"] | None = Field(
        None, description="readiness: whether the database answered (checked at most once a second)")
    fit_pool: Literal["ok", "starting", "down"] | None = Field(
        None, description="readiness: every fit process alive and warmed up (ok), some still warming up "
        "(starting: at start, or after a dead one was replaced), or none alive (down). With "
        "CALIBO_WORKER_MODE=queue: ok while this replica can queue fits (the queue is in the database "
        "checked above; `calibo worker` processes report through their own healthcheck)")
