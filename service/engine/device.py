"""Where a fit runs: ``CALIBO_DEVICE=auto|cpu|cuda`` resolved per fit.

``auto`` picks CUDA when torch sees a GPU and the CPU otherwise; ``cuda``
without a GPU is the CPU too (with the reason), so a setting never loses a fit.
torch is imported only when an NVIDIA driver is present: on a machine without
one, the scikit-learn surrogates never pay for importing it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

DEVICES = ("auto", "cpu", "cuda")


_DRIVER_FILES = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/nvidia0")


def cuda_available() -> bool:
    """Whether torch can use a GPU; without an NVIDIA driver, answered without importing torch."""
    if not any(os.path.exists(p) for p in _DRIVER_FILES):
        return False  # importing torch (1-2 s) only to hear "no" would slow every first fit
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a server dependency
        return False
    return bool(torch.cuda.is_available())


def resolve(preference: str | None = None) -> tuple[str, str | None]:
    """``(device, why_not)``: the device to fit on, and why it is not the one asked for."""
    pref = (preference or os.environ.get("CALIBO_DEVICE") or "auto").strip().lower()
    if pref not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, not {pref!r}")
    if pref == "cpu":
        return "cpu", None
    if cuda_available():
        return "cuda", None
    return "cpu", ("CALIBO_DEVICE=cuda but torch sees no GPU" if pref == "cuda" else None)


def is_cuda_error(exc: BaseException) -> bool:
    """Whether ``exc`` came from CUDA (out of memory, a driver or kernel error)."""
    try:
        import torch
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
    except ImportError:  # pragma: no cover
        pass
    text = f"{type(exc).__name__}: {exc}"
    return isinstance(exc, RuntimeError) and any(
        k in text for k in ("CUDA", "cuda", "cuDNN", "CUBLAS", "cublas", "NCCL", "device-side"))


@contextmanager
def torch_threads(device: str) -> Iterator[None]:
    """One intra-op torch thread for a CPU fit (``CALIBO_TORCH_THREADS`` overrides), restored after.

    As the scikit-learn path runs under one BLAS thread: the fit worker runs
    fits side by side, and OpenMP threads on shared cores spin-wait at every
    barrier (measured: a 150-point GP tuning 0.3 s on one thread, 0.5 to 3.3 s
    on two while another process held a core).
    """
    if device != "cpu":
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(os.environ.get("CALIBO_TORCH_THREADS", "1"))))
    try:
        yield
    finally:
        torch.set_num_threads(before)
