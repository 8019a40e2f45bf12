"""What the steps mixed into ``StudyService`` (``AskSteps``, ``TellSteps``, ``AddedTrials``,
``SpaceGrowth``) share of it, declared once so that each step's uses are checked: the process's
settings, storage, fit backend and caches, and the service's methods the steps call."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from calibo.engine import Snapshot

    from ..config import Settings
    from ..storage import Storage, StudyTx
    from ..workers import Fits
    from .caches import StudyCaches
    from .definitions import StudyDef


class StudySteps:
    """The base of ``StudyService``'s steps: attributes set by ``StudyService.__init__``."""

    settings: Settings
    storage: Storage
    fits: Fits | None
    metrics: Any
    _caches: StudyCaches

    if TYPE_CHECKING:  # defined by SpaceGrowth and StudyService
        def study(self, study_id: int) -> StudyDef: ...

        def _reload(self, study_id: int) -> StudyDef: ...

        def _current(self, tx: StudyTx, sd: StudyDef) -> StudyDef: ...

        def _snapshot(self, tx_data: Any, study_id: int, version: int) -> Snapshot | None: ...

        def heartbeat_timeout(self, sd: StudyDef) -> float: ...
