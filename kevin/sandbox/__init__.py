"""kevin.sandbox: the kernel evaluator (threat model: see below, completed with the evaluator)."""

from .calibrate import CalibrationReport, calibrate, calibrate_many
from .config import SandboxConfig
from .result import STATUSES, EvalResult
from .sandbox import Sandbox, evaluate


def check_format(candidate_src: str, *, backend: str = "cuda", allow_libraries: bool = False) -> list[str]:
    """The static checks (`kevin.sandbox.static.check_format`): [] when acceptable."""
    from .static import check_format as _check

    return _check(candidate_src, backend=backend, allow_libraries=allow_libraries)


__all__ = [
    "CalibrationReport", "EvalResult", "STATUSES", "Sandbox", "SandboxConfig", "calibrate", "calibrate_many",
    "check_format", "evaluate",
]
