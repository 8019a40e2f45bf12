"""A study's settings on the wire: engine and service settings, surrogate options, the pruner."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, create_model

from calibo.engine.adaptive import ADAPTERS
from calibo.engine.config import CONFORMAL_MODES, MAX_OBJECTIVES
from calibo.engine.limits import (
    INT_SETTINGS,
    OPEN_RANGES,
    SETTING_RANGES,
    SURROGATE_CHOICES,
    SURROGATE_OPTIONS,
)
from calibo.engine.pruning import PRUNERS
from calibo.engine.warp import WARPS

from ...studies import SERVICE_SETTINGS
from .fields import Integral, JsonInt, Real, RequestBody, json_int


def _bounded(name: str, kind: Any, lo: float, hi: float, open_lo: bool = False, open_hi: bool = False,
             what: str = "") -> tuple[Any, Any]:
    bounds: dict[str, Any] = {"gt" if open_lo else "ge": lo, "lt" if open_hi else "le": hi}
    typ = json_int(**bounds) if kind is JsonInt else Annotated[kind, Field(**bounds)]
    return typ | None, Field(None, description=what or None)


def _option(key: str) -> tuple[Any, Any]:
    """An option as the schema shows it: the widest range of the surrogates that take it."""
    takers = {n: o[key] for n, o in SURROGATE_OPTIONS.items() if key in o}
    kind = next(iter(takers.values()))[0]
    lo, hi = min(r[1] for r in takers.values()), max(r[2] for r in takers.values())
    what = "; ".join(f"{n}: [{r[1]:g}, {r[2]:g}]" for n, r in takers.items())
    return _bounded(key, JsonInt if kind == "int" else Real, lo, hi, what=what)


def _choice(key: str) -> tuple[Any, Any]:
    takers = {n: o[key] for n, o in SURROGATE_CHOICES.items() if key in o}
    words = tuple(dict.fromkeys(w for ws in takers.values() for w in ws))
    what = "; ".join(f"{n}: {', '.join(ws)}" for n, ws in takers.items())
    return Literal[words] | None, Field(None, description=what)  # type: ignore[valid-type]  # a run-time tuple


if TYPE_CHECKING:  # models built at import from the engine's tables: to a type checker, the BaseModel they are
    SurrogateOptions = BaseModel
    StudySettings = BaseModel
else:
    SurrogateOptions = create_model(
        "SurrogateOptions", __config__=ConfigDict(extra="forbid"),
        __doc__="options of the study's surrogate (each only for the surrogates its description names)",
        **{key: _option(key) for opts in SURROGATE_OPTIONS.values() for key in opts},
        **{key: _choice(key) for opts in SURROGATE_CHOICES.values() for key in opts},
    )

    StudySettings = create_model(
        "StudySettings", __config__=ConfigDict(extra="forbid"),
        __doc__="engine and service settings; null or absent means the default (see the study view)",
        adapter=(Literal[ADAPTERS] | None, Field(None, description="aci (default), dtaci or none")),
        conformal=(Literal[CONFORMAL_MODES] | None, Field(None, description="adaptive (default: raw, then CV+, "
                   "then split), split, cv+, crossval (CrossVal-CP), jab+ (Jackknife+-after-bootstrap) or raw")),
        warp=(Literal[WARPS] | None, Field(None, description="output warp before the fit: yeo-johnson (default: "
              "a power transform fitted to the values, for heavy-tailed and quantized metrics), yeo-johnson-tail "
              "(the same transform on the side it compresses only) or none")),
        surrogate_options=(SurrogateOptions | None, None),
        multi_acquisition=(Literal["auto", "ehvi", "parego"] | None, Field(
            None, description="a multi-objective study's acquisition: auto (default: ehvi for 2 objectives, parego "
            "for 3-4), ehvi (expected hypervolume improvement, 2 or 3 objectives) or parego (random Chebyshev "
            "scalarisations)")),
        reference_point=(Annotated[list[Real], Field(min_length=2, max_length=MAX_OBJECTIVES)] | None, Field(
            None, description="a multi-objective study's hypervolume reference point, one value per objective in its "
            "own units (default: each objective's worst observed value plus a tenth of its observed range)")),
        **{name: _bounded(name, JsonInt if name in INT_SETTINGS else Real, lo, hi,
                          *OPEN_RANGES.get(name, (False, False)))
           for name, (lo, hi) in SETTING_RANGES.items()},
        ask_wait_seconds=_bounded("ask_wait_seconds", Real, *SERVICE_SETTINGS["ask_wait_seconds"],
                                  what="how long an ask by a sequential user may wait for a fit covering the "
                                  "latest tells (default: the server's)"),
        heartbeat_timeout_seconds=_bounded("heartbeat_timeout_seconds", Real,
                                           *SERVICE_SETTINGS["heartbeat_timeout_seconds"],
                                           what="running trials silent for longer are failed (default: the "
                                           "server's); a late tell is still recorded"),
    )


class PrunerSpec(RequestBody):
    """A pruner and its settings (every setting optional)."""

    name: Literal[PRUNERS] = Field(  # type: ignore[valid-type]  # a run-time tuple
        description="none, median, sh (asynchronous successive halving), hb "
        "(hyperband), sh+ / hb+ (UQ-guided: keep counts from the rung's confidence curve)")
    min_resource: Annotated[StrictInt, Field(ge=1, le=1_000_000), Integral] | None = Field(
        None, description="steps to the first rung (1)")
    max_resource: Annotated[StrictInt, Field(ge=1, le=1_000_000), Integral] | None = Field(
        None, description="steps of a full run (100): no pruning at or past it")
    reduction_factor: Annotated[StrictInt, Field(ge=2, le=100), Integral] | None = Field(
        None, description="eta: rungs grow by it (3)")
    window: Annotated[StrictInt, Field(ge=1, le=1000), Integral] | None = Field(
        None, description="sh+/hb+: a curve's uncertainty is the std of its last window + 1 values (10)")
    n_startup_trials: Annotated[StrictInt, Field(ge=0, le=10_000), Integral] | None = Field(
        None, description="median: completed trials with a value at the step before it prunes (5)")
    n_warmup_steps: Annotated[StrictInt, Field(ge=0, le=1_000_000), Integral] | None = Field(
        None, description="median: no pruning before (0)")
    min_early_stopping_rate: Annotated[StrictInt, Field(ge=0, le=30), Integral] | None = Field(
        None, description="sh/sh+: the first rung at min_resource * reduction_factor ** rate (0)")
    feed_pruned: StrictBool | None = Field(
        None, description="pruned trials told with a value feed the surrogate with it (false)")

    def plain(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


PrunerName = Literal[PRUNERS]  # type: ignore[valid-type]  # a run-time tuple


def _pruner_name(v: Any) -> Any:
    """``"sh+"`` is short for ``{"name": "sh+"}`` (so errors name the field in either form)."""
    return {"name": v} if isinstance(v, str) else v


# a pruner by name or as an object, the name short for {"name": ...}
Pruner = Annotated[PrunerSpec, BeforeValidator(_pruner_name, json_schema_input_type=PrunerName | PrunerSpec)]
