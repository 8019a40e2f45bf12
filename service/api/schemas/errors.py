"""The error body every 4xx and 503 answer carries."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Difference(BaseModel):
    field: str = Field(description="the create request's field", examples=["seed"])
    existing: Any = Field(description="the existing study's value (null: not set)", examples=[0])
    requested: Any = Field(description="this request's value (null: not set)", examples=[42])


class ErrorDetail(BaseModel):
    code: str = Field(examples=["invalid_request"])
    message: str = Field(examples=["low must be strictly less than high"])
    field: str | None = Field(None, examples=["space.x1.low"])
    differences: list[Difference] | None = Field(
        None, description="409 name_conflict: every field whose value differs from the existing study's")


class ErrorBody(BaseModel):
    error: ErrorDetail
