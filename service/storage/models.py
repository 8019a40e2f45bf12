"""SQLAlchemy 2.0 models. The schema itself is created only by Alembic (migrations/)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy import (
    Double as _Double,
)
from sqlalchemy.dialects.postgresql import BYTEA
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ..finite import finite_float

# PostgreSQL's ``json`` (not ``jsonb``): it keeps the text as written, so keys come back in the order
# they were written (a space's parameters, user attributes) as on SQLite, and numbers as written.
# Python's None is SQL NULL, never the JSON ``null`` (a read ``IS NOT NULL`` means a value).
Json = JSON(none_as_null=True)
Blob = LargeBinary().with_variant(BYTEA(), "postgresql")


class Double(TypeDecorator[float]):
    """A floating-point column written through ``finite.finite_float``: ``-0.0`` as ``0.0`` (SQLite keeps
    no sign), never an infinity or NaN."""

    impl = _Double
    cache_ok = True

    def process_bind_param(self, value: float | None, dialect: Dialect) -> float | None:
        return None if value is None else finite_float(float(value), "a number column")


TRIAL_STATES = ("waiting", "running", "complete", "failed", "pruned")
ORIGINS = ("enqueued", "added", "copied")  # how a trial came to be, when no ask chose it
FINISHED_STATES = ("complete", "failed", "pruned")


class Base(DeclarativeBase):
    pass


def calibo_owns(name: str | None, type_: str, parent_names: object = None) -> bool:
    """Alembic's ``include_name``: the fit queue's tables (migration 0004) belong to procrastinate's
    schema, not to these models, so comparisons and autogenerate leave them alone."""
    return not (type_ == "table" and (name or "").startswith("procrastinate_"))


class StudyRow(Base):
    """A study: its definition, counters, adaptive state (``state``: what the engine's
    ``StudyState.to_dict`` writes, stored as it is) and newest-snapshot pointer.

    The counters (``next_number``, ``n_complete``) and the adaptive state change
    only under the study's lock, so asks and tells see them consistently.
    """

    __tablename__ = "studies"
    # ids are never reused (AUTOINCREMENT on SQLite too): caches and clients key on them
    __table_args__ = (UniqueConstraint("name", name="uq_studies_name"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(255))
    definition: Mapped[dict[str, Any]] = mapped_column(Json)  # canonical create request
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    next_number: Mapped[int] = mapped_column(Integer, default=0)
    n_complete: Mapped[int] = mapped_column(Integer, default=0)
    # failed trials a fit learns from: told or added failed, not failed by the service for silence
    n_failed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    finish_seq: Mapped[int] = mapped_column(Integer, default=0)  # trials finished so far, in order
    state: Mapped[dict[str, Any]] = mapped_column(Json)
    best_trial_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    best_value: Mapped[float | None] = mapped_column(Double, nullable=True)
    snapshot_version: Mapped[int] = mapped_column(Integer, default=0)
    snapshot_n_obs: Mapped[int] = mapped_column(Integer, default=0)
    snapshot_n_failed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # failures it learned
    fitted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    fit_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    user_attrs: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    system_attrs: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)  # an Optuna storage's
    # changes of the definition (its space grew): a process's cached definition, or a fit's, is stale
    # when it was read at another revision
    revision: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class TrialRow(Base):
    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("study_id", "number", name="uq_trials_study_number"),
        Index("ix_trials_study_state", "study_id", "state"),
        Index("ix_trials_study_finish_seq", "study_id", "finish_seq"),
        Index("ix_trials_study_ask_key", "study_id", "ask_key"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    params: Mapped[dict[str, Any]] = mapped_column(Json)
    ukey: Mapped[str] = mapped_column(Text)  # hex of the engine's configuration key (16 per parameter)
    value: Mapped[float | None] = mapped_column(Double, nullable=True)
    prediction: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    points: Mapped[bytes | None] = mapped_column(Blob, nullable=True)  # conformal point sets, for adapt
    record: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)  # adapt's calibration record
    worker_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    ask_key: Mapped[str | None] = mapped_column(String(64), nullable=True)  # Idempotency-Key of its ask
    snapshot_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    asked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # position in the study's finishing order: lets an ask fetch only what finished since its last look
    finish_seq: Mapped[int | None] = mapped_column(Integer, nullable=True)
    origin: Mapped[str | None] = mapped_column(String(16), nullable=True)  # ORIGINS; null: chosen by an ask
    constraints: Mapped[list[float] | None] = mapped_column(Json, nullable=True)  # told constraint values
    values: Mapped[list[float] | None] = mapped_column(Json, nullable=True)  # a multi-objective study's
    user_attrs: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    system_attrs: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)  # an Optuna storage's
    # the distribution each parameter was drawn from where the caller gave one (Optuna's JSON form); null:
    # the study's space
    distributions: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    # when it started running, where that is not its ask (null: asked_at; a waiting trial has not started)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class SnapshotRow(Base):
    __tablename__ = "snapshots"
    __table_args__ = (UniqueConstraint("study_id", "version", name="uq_snapshots_study_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    n_obs: Mapped[int] = mapped_column(Integer)
    method: Mapped[str] = mapped_column(String(16))
    fit_seconds: Mapped[float] = mapped_column(Double)
    device: Mapped[str | None] = mapped_column(String(16), nullable=True)  # where the fit trained
    # full: hyperparameters tuned; update: the newest full refit's kept (engine.retune); extend: the
    # newest snapshot brought up to date at its candidates (engine.extend)
    kind: Mapped[str] = mapped_column(String(8), default="full", server_default="full")
    tuned: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)  # what the next fit keeps
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    data: Mapped[bytes] = mapped_column(Blob)


class IntermediateRow(Base):
    """A learning-curve point a running trial reported, with the pruning decision it got."""

    __tablename__ = "intermediate_values"
    __table_args__ = (UniqueConstraint("trial_id", "step", name="uq_intermediate_trial_step"),
                      Index("ix_intermediate_study", "study_id"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    value: Mapped[float] = mapped_column(Double)
    should_prune: Mapped[bool] = mapped_column(Boolean)
    reported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
