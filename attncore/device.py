"""Device resolution.

Order of precedence: the ``ATTNCORE_DEVICE`` environment variable (``cpu``,
``cuda``, ``cuda:N``, ``mps``), then an explicit ``preference``, then CUDA when
it is available, else the CPU. Asking for a device that is not present raises
:class:`DeviceUnavailableError` with a message that says what is present.
"""

from __future__ import annotations

import os

import torch

__all__ = [
    "cpu_model",
    "DeviceUnavailableError",
    "available_devices",
    "describe_device",
    "resolve_device",
]

ENV_VAR = "ATTNCORE_DEVICE"


class DeviceUnavailableError(RuntimeError):
    """The requested device does not exist on this machine."""


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def available_devices() -> list[str]:
    """Names of the devices usable here, best first (e.g. ``["cuda:0", "cpu"]``)."""
    names: list[str] = []
    if torch.cuda.is_available():
        names.extend(f"cuda:{i}" for i in range(torch.cuda.device_count()))
    if _mps_available():
        names.append("mps")
    names.append("cpu")
    return names


def _check(device: torch.device) -> torch.device:
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"CUDA was requested ({device}) but no CUDA GPU is available; "
                f"usable devices: {', '.join(available_devices())}."
            )
        index = 0 if device.index is None else device.index
        if index >= torch.cuda.device_count():
            raise DeviceUnavailableError(
                f"{device} was requested but only {torch.cuda.device_count()} CUDA "
                "device(s) exist."
            )
        return torch.device("cuda", index)
    if device.type == "mps" and not _mps_available():
        raise DeviceUnavailableError("MPS was requested but is not available here.")
    if device.type not in {"cpu", "cuda", "mps"}:
        raise DeviceUnavailableError(f"Unsupported device type {device.type!r}.")
    return device


def _parse(name: str) -> torch.device:
    try:
        return torch.device(name.strip().lower())
    except RuntimeError as exc:
        raise DeviceUnavailableError(
            f"{name!r} is not a device name; use cpu, cuda, cuda:N or mps."
        ) from exc


def resolve_device(preference: str | torch.device | None = "auto") -> torch.device:
    """Return the device to compute on.

    Args:
        preference: ``"auto"`` / ``None`` (CUDA if present, else CPU) or an explicit
            device such as ``"cpu"``, ``"cuda:1"``. The ``ATTNCORE_DEVICE``
            environment variable, when set and not ``auto``, wins over it, unless the
            device it names is absent here: then an explicit ``preference`` is used (the
            app falls back to the CPU and says so) and ``auto`` raises.

    Raises:
        DeviceUnavailableError: the chosen device does not exist here.
    """
    env = os.environ.get(ENV_VAR, "").strip()
    explicit = isinstance(preference, torch.device) or (
        preference is not None and str(preference).strip().lower() not in {"", "auto"})
    if env and env.lower() != "auto":
        try:
            return _check(_parse(env))
        except DeviceUnavailableError:
            if not explicit:
                raise
            # the forced device is absent: an explicit device wins (the app's fallback to the CPU)
            return _check(preference if isinstance(preference, torch.device) else _parse(str(preference)))
    if isinstance(preference, torch.device):
        return _check(preference)
    if preference is None or str(preference).strip().lower() in {"", "auto"}:
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    return _check(_parse(str(preference)))


def describe_device(device: torch.device) -> str:
    """A short human label: ``"CPU (2 threads)"`` or ``"CUDA 0: NVIDIA H100"``."""
    if device.type == "cuda":
        index = 0 if device.index is None else device.index
        return f"CUDA {index}: {torch.cuda.get_device_name(index)}"
    if device.type == "mps":
        return "Apple MPS"
    return f"CPU ({torch.get_num_threads()} threads)"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s first "model name"), else :func:`platform.processor`, else
    the machine type: what a shipped result's header says it ran on."""
    import platform
    from pathlib import Path

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
