"""What Storage's query mixins (``studies``, ``trials``, ``fits``) use of it: its sessions, its
per-study lock and its dialect, declared here for the type checker; ``repo.Storage`` defines them."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from .tx import StudyTx


class Sessions:
    """The base of :class:`~calibo.server.storage.Storage`'s query mixins (empty at run time)."""

    dialect: str  # the engine's dialect name: sqlite or postgresql

    if TYPE_CHECKING:
        def _read(self) -> AbstractContextManager[Session]: ...

        def _write(self) -> AbstractContextManager[Session]: ...

        def locked(self, study_id: int) -> AbstractContextManager[StudyTx]: ...
