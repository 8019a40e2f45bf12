"""Ray Tune integration, installed as ``calibo.ray``: :class:`CaliboSearch`.

A Ray Tune ``Searcher`` whose suggestions come from a study on a calibo server. Needs Ray Tune
(``pip install "calibo[ray]"``); ``import calibo`` never imports Ray, importing this module does.

>>> from ray import tune
>>> from calibo.ray import CaliboSearch
>>> tuner = tune.Tuner(                                              # doctest: +SKIP
...     train,
...     param_space={"lr": tune.loguniform(1e-4, 1e-1), "layers": tune.randint(1, 5)},
...     tune_config=tune.TuneConfig(
...         search_alg=CaliboSearch(url="http://calibo:8000", study_name="mnist"),
...         metric="loss", mode="min", num_samples=100, max_concurrent_trials=8),
... )
>>> tuner.fit()                                                      # doctest: +SKIP

What runs where:

* Tune calls ``suggest`` synchronously in its driver loop. The searcher hands out trials that it
  asked the server for ahead of time (one ``ask`` of ``batch`` trials, refilled in a background
  thread when half are handed out), so a suggestion is a local pop, not a round trip.
* Results and completions are queued for one background sender thread: the driver never waits on
  HTTP. Each trial's intermediate results are reported (``training_iteration`` as the step) and its
  end is told once: complete with its metric, ``failed`` when it errored, ``pruned`` (with its last
  value) when a scheduler stopped it early. Every tell carries ``{"ray_trial_id": ...}``.
* The searcher keeps no state of its own beyond the study, the map from Tune's trial ids to the
  study's trials and the trials fetched ahead: ``save`` writes exactly that, and a restored
  searcher continues the same study.
"""

# ruff: noqa: E402 - the extra's guard comes before the imports it protects
try:
    import ray.tune  # noqa: F401
except ImportError as e:  # the extra is not installed
    raise ImportError('calibo.ray needs Ray Tune: pip install "calibo[ray]"') from e

from .searcher import UNUSED, CaliboSearch
from .space import TuneSpace, convert_search_space, read_space

__all__ = ["UNUSED", "CaliboSearch", "TuneSpace", "convert_search_space", "read_space"]
