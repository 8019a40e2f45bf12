"""Growing a study's space (``PATCH /v1/studies/{study}/space``), and keeping every process's cached
definition of the study current.

The engine decides what growth is (``SearchSpace.grow``: new parameters, new choices, wider ranges, a
condition's new values); here the new space is stored under the study's lock, in one transaction
with what depends on it: the definition's revision moves on, every trial's configuration key is
recomputed (the keys that keep an ask from suggesting a configuration already tried), and the
snapshots of the old space are deleted. Asks and tells racing the change queue on the same lock, so
each runs wholly before or wholly after it; an ask after it that finds no fit of the new space yet
draws from the study's quasi-random sequence (or waits for the refit queued here, as any ask does).

A process's cached ``StudyDef`` carries its revision; every locked transaction reads the study's
revision with its row (``_current``), and a process that finds another one's change there parses
the new definition and drops what it cached for the old space (finished keys, snapshots).
"""

from __future__ import annotations

from typing import Any

from calibo.engine import SearchSpace
from calibo.engine.errors import FieldError

from ..errors import InvalidRequest
from ..storage import StudyInfo, StudyTx
from .definitions import StudyDef
from .steps import StudySteps


class SpaceGrowth(StudySteps):
    """:class:`StudyService`'s space growth and definition cache (mixed into it)."""

    def study(self, study_id: int) -> StudyDef:
        """The study's definition (cached; ``_current`` under the study's lock says whether it still is)."""
        d = self._caches.definition(study_id)
        if d is None:
            definition, revision = self.storage.definition_at(study_id)
            d = self._keep(StudyDef.parse(study_id, definition, revision))
        return d

    def _reload(self, study_id: int) -> StudyDef:
        """The study's definition as stored now."""
        definition, revision = self.storage.definition_at(study_id)
        return self._keep(StudyDef.parse(study_id, definition, revision))

    def _keep(self, d: StudyDef) -> StudyDef:
        """Cache ``d`` (``StudyCaches.keep``: a newer revision's cached definition wins)."""
        return self._caches.keep(d)

    def _current(self, tx: StudyTx, sd: StudyDef) -> StudyDef:
        """``sd``, or the definition stored now if the study's space grew since ``sd`` was read (the
        lock's row holds the revision; the definition is read only then)."""
        revision = tx.study.revision or 0
        if revision == sd.revision:
            return sd
        return self._keep(StudyDef.parse(sd.id, tx.definition(), revision))

    def _fresh(self, info: StudyInfo) -> StudyDef:
        """The definition of a study view just read (``info``): the cached one if it is of that revision."""
        sd = self.study(info.id)
        if sd.revision >= info.revision:
            return sd
        return self._keep(StudyDef.parse(info.id, info.definition, info.revision))

    def grow_space(self, study_id: int, changes: dict[str, Any]) -> tuple[StudyInfo, bool]:
        """Grow the study's space by ``changes`` (``{name: parameter}``; see ``SearchSpace.grow``); the
        study, and whether its space changed (the same growth again changes nothing). InvalidRequest
        naming the field for anything but growth."""
        with self.storage.locked(study_id) as tx:
            definition = tx.definition()
            old = SearchSpace.from_dict(definition["space"])
            try:
                new = old.grow(changes)
            except FieldError as e:
                raise InvalidRequest(e.message, field=e.field) from None
            changed = new.to_dict() != old.to_dict()
            if changed:
                definition = {**definition, "space": new.to_dict()}
                tx.grow(definition, lambda params, state, old: _key(new, params, state, old))
                revision, n_complete = tx.study.revision, tx.study.n_complete
        if changed:
            sd = self._keep(StudyDef.parse(study_id, definition, revision))
            if self.fits is not None:
                self.fits.restart(study_id)
                if sd.config.fits(n_complete):
                    self.fits.request(study_id)
        return self.storage.get_study(study_id), changed


def _key(space: SearchSpace, params: dict[str, Any], state: str, old: str) -> str:
    """A stored trial's configuration key under ``space``. An enqueued trial keeps none when it had none
    (enqueued without skip_if_exists, or partly: ``asks._queue``); with one, its configuration is keyed
    as a finished trial's of the same parameters is (a parameter added since inactive for both), so
    the ask that finds it evaluated still takes it off the queue."""
    if state == "waiting" and not old:
        return ""
    if not old and state == "running" and not space.is_configuration(params):
        return ""  # a trial its caller runs, with some of its parameters set so far
    return space.key(params).hex()
