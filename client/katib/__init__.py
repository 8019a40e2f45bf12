"""calibo.katib: a Kubeflow Katib suggestion service over a calibo server (``calibo katib``).

Katib runs one suggestion service per experiment whose ``algorithmName`` its ``katib-config`` maps to an
image; this one answers Katib's ``Suggestion`` gRPC API on port 6789 by calling a calibo server, so the
study, its calibrated surrogate and its running trials live in calibo. Needs the ``katib`` extra
(``pip install "calibo[katib]"``: grpcio, grpcio-health-checking, protobuf).

>>> from calibo.katib import serve
>>> serve("http://calibo-api.calibo.svc:8000", port=6789)      # doctest: +SKIP
"""

try:
    import grpc  # noqa: F401
    import grpc_health  # noqa: F401
    from google import protobuf  # noqa: F401
except ModuleNotFoundError as e:  # pragma: no cover - depends on the install
    raise ImportError(f"calibo.katib needs the katib extra: pip install 'calibo[katib]' ({e})") from e

from .experiment import ALGORITHM, TRIAL_LABEL, StudyDefinition, Unsupported, definition
from .service import DEFAULT_PORT, SuggestionService, build_server, serve

__all__ = ["ALGORITHM", "DEFAULT_PORT", "TRIAL_LABEL", "StudyDefinition", "SuggestionService", "Unsupported",
           "build_server", "definition", "serve"]
