"""Orphaned trials: running trials whose worker fell silent are failed in the background.

A worker that dies leaves its trial running, which keeps its configuration
out of every suggestion and the study's crowd count inflated. The reaper
fails each running trial silent (no ask, no heartbeat) for longer than its
study's ``heartbeat_timeout_seconds`` (the server's default when the study
sets none). A late heartbeat of such a trial answers 409 ``trial_expired``;
a late tell is recorded all the same (see ``StudyService._tell_in``).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from ..errors import NotFound
from ..storage import now
from .service import StudyService

log = logging.getLogger("calibo.reaper")


def reap_once(svc: StudyService) -> int:
    """One pass over the studies with running trials; how many trials it failed."""
    failed = 0
    t0 = now()
    for study_id, oldest in svc.storage.oldest_heartbeats().items():
        try:
            timeout = svc.heartbeat_timeout(svc.study(study_id))
        except NotFound:
            continue  # deleted meanwhile
        cutoff = t0 - timedelta(seconds=timeout)
        if oldest < cutoff:
            failed += svc.storage.reap(study_id, cutoff)
    if failed:
        log.info("failed %d running trials whose heartbeats stopped", failed)
    return failed
