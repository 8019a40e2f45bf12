"""What each request does with a study: definitions, ask and tell, views, calibration."""

from .definitions import SERVICE_SETTINGS, StudyDef, build_definition, default_seed
from .service import StudyService
from .views import study_view, trial_view

__all__ = ["SERVICE_SETTINGS", "StudyDef", "StudyService", "build_definition", "default_seed",
           "study_view", "trial_view"]
