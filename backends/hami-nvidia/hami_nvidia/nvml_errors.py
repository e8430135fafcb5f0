"""NVML's failures as ``HamiError`` s, and the one wrapper every NVML call goes through
(``nvml`` and ``nvml_mig`` both call it; it lives apart so neither imports the other
back)."""

from __future__ import annotations

from typing import Any

from hami_core.backend import HamiError


class NvmlError(HamiError):
    """An NVML call failed.

    Attributes:
        call: the NVML function, e.g. ``nvmlDeviceGetMemoryInfo``.
        code: the ``nvmlReturn_t`` value (0 when unknown).
    """

    def __init__(self, call: str, code: int, reason: str) -> None:
        super().__init__(f"{call} failed: {reason} (NVML error {code})")
        self.call = call
        self.code = code


class NvmlMissingError(NvmlError):
    """``libnvidia-ml.so.1`` cannot be loaded: no NVIDIA driver on this node."""


def reason_of(exc: BaseException) -> str:
    """``str(exc)``, or the exception's type name when even that fails (pynvml's error
    strings call into the library)."""
    try:
        return str(exc)
    except Exception:
        return type(exc).__name__


def nvml_call(name: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` (a pynvml function), its ``NVMLError`` raised as ``NvmlError``
    naming ``name`` (the NVML function) and the ``nvmlReturn_t`` code."""
    import pynvml

    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        raise NvmlError(name, int(getattr(exc, "value", 0) or 0), reason_of(exc)) from None
