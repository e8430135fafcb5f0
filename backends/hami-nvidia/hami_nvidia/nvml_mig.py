"""NVML's MIG calls through ``pynvml``: GPU instance profiles and their placements, the
GPU and compute instances of a GPU, creating and destroying them.

Source: NVML API reference, "Multi Instance GPU Management"
(``nvmlDeviceGetGpuInstanceProfileInfoV``, ``nvmlDeviceGetGpuInstancePossiblePlacements_v2``,
``nvmlDeviceCreateGpuInstanceWithPlacement``, ``nvmlDeviceGetGpuInstances``,
``nvmlGpuInstanceGetInfo``, ``nvmlGpuInstanceGetComputeInstanceProfileInfoV``,
``nvmlGpuInstanceCreateComputeInstance``, ``nvmlGpuInstanceGetComputeInstances``,
``nvmlComputeInstanceGetInfo_v2``, ``nvmlComputeInstanceDestroy``,
``nvmlGpuInstanceDestroy``, ``nvmlDeviceGetMigDeviceHandleByIndex``,
``nvmlDeviceGetGpuInstanceId`` / ``nvmlDeviceGetComputeInstanceId``); the profile ids
are nvml.h's ``NVML_GPU_INSTANCE_PROFILE_*`` / ``NVML_COMPUTE_INSTANCE_PROFILE_*``.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import attrs

from .nvml_errors import NvmlError, nvml_call

#: NVML_GPU_INSTANCE_PROFILE_COUNT of nvml.h 12.x (profile ids are 0 .. count-1).
GPU_INSTANCE_PROFILE_COUNT = 0x12
#: A compute instance covering a whole GPU instance of n compute slices
#: (``NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE``).
COMPUTE_PROFILE_FOR_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
COMPUTE_ENGINE_SHARED = 0
MAX_PLACEMENTS = 32
MAX_INSTANCES = 32
#: nvml.h return codes a missing profile or instance answers with.
_ABSENT = (2, 3, 6)  # INVALID_ARGUMENT, NOT_SUPPORTED, NOT_FOUND


def _listed(item_type: Any, name: str, fn: Any, parent: Any, profile_id: int) -> list[Any]:
    """The instances an NVML ``Get*Instances(parent, profile, array, &count)`` call lists
    (at most ``MAX_INSTANCES``); none where the profile is absent (``_ABSENT``).

    Raises:
        NvmlError: any other NVML failure.
    """
    arr = (item_type * MAX_INSTANCES)()
    count = ctypes.c_uint(MAX_INSTANCES)
    try:
        nvml_call(name, fn, parent, profile_id, arr, ctypes.byref(count))
    except NvmlError as exc:
        if exc.code in _ABSENT:
            return []
        raise
    return [arr[i] for i in range(count.value)]


@attrs.frozen(kw_only=True)
class NvmlMigProfile:
    """A GPU instance profile of a GPU in MIG mode.

    Attributes:
        profile_id: ``NVML_GPU_INSTANCE_PROFILE_*``.
        name: NVIDIA's name, e.g. ``1g.10gb`` (NVML's ``name`` without ``MIG ``, or
            ``<slices>g.<GiB rounded up>gb`` when NVML gives none).
        slice_count: compute slices; instance_count: most instances at once;
        memory_mib: memory of one instance; multiprocessors: its SMs;
        placements: ``(start, size)`` in memory slices, as NVML lists them.
    """

    profile_id: int
    name: str
    slice_count: int
    instance_count: int
    memory_mib: int
    multiprocessors: int
    placements: tuple[tuple[int, int], ...] = ()


@attrs.frozen(kw_only=True)
class NvmlMigInstance:
    """A GPU instance and its compute instance (None when it has none yet); ``mig_index``
    is the index of its MIG device under the GPU (``nvmlDeviceGetMigDeviceHandleByIndex``,
    ``nvidia-smi -L``'s "MIG ... Device <n>"), None without a compute instance."""

    gpu_instance_id: int
    profile_id: int
    start: int
    size: int
    compute_instance_id: int | None = None
    mig_uuid: str = ""
    mig_index: int | None = None


def profile_name(nvml_name: Any, slices: int, memory_mib: int) -> str:
    """``MIG 1g.10gb`` -> ``1g.10gb``; without a name, ``<slices>g.<GiB up>gb``."""
    text = nvml_name.decode() if isinstance(nvml_name, bytes) else str(nvml_name or "")
    text = text.strip()
    if text.startswith("MIG "):
        text = text[4:].strip()
    return text or f"{slices}g.{(memory_mib + 1023) // 1024}gb"


class PynvmlMig:
    """The MIG part of ``PynvmlLibrary`` (it provides ``_lock``, ``start`` and the
    handle lookups). Every method raises ``NvmlError``."""

    # provided by PynvmlLibrary, the one class this mixin is part of
    _lock: threading.RLock
    start: Callable[[], None]

    def _handle(self, pynvml: Any, index: int) -> Any:
        return nvml_call("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index)

    def mig_profiles(self, index: int) -> list[NvmlMigProfile]:
        """The GPU instance profiles GPU ``index`` offers, with their placements."""
        with self._lock:
            self.start()
            import pynvml

            handle = self._handle(pynvml, index)
            out = []
            for pid in range(GPU_INSTANCE_PROFILE_COUNT):
                try:
                    info = nvml_call(
                        "nvmlDeviceGetGpuInstanceProfileInfoV",
                        pynvml.nvmlDeviceGetGpuInstanceProfileInfo,
                        handle,
                        pid,
                    )
                except NvmlError as exc:
                    if exc.code in _ABSENT:
                        continue
                    raise
                arr = (pynvml.c_nvmlGpuInstancePlacement_t * MAX_PLACEMENTS)()
                count = ctypes.c_uint(MAX_PLACEMENTS)
                nvml_call(
                    "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
                    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements,
                    handle,
                    info.id,
                    arr,
                    ctypes.byref(count),
                )
                memory = int(info.memorySizeMB)
                out.append(
                    NvmlMigProfile(
                        profile_id=int(info.id),
                        name=profile_name(getattr(info, "name", ""), int(info.sliceCount), memory),
                        slice_count=int(info.sliceCount),
                        instance_count=int(info.instanceCount),
                        memory_mib=memory,
                        multiprocessors=int(info.multiprocessorCount),
                        placements=tuple(
                            (int(arr[i].start), int(arr[i].size)) for i in range(count.value)
                        ),
                    )
                )
            return out

    def mig_instances(self, index: int) -> list[NvmlMigInstance]:
        """Every GPU instance of GPU ``index``, its compute instance and MIG UUID."""
        with self._lock:
            self.start()
            import pynvml

            handle = self._handle(pynvml, index)
            uuids = self._mig_uuids(pynvml, handle)
            out = []
            for pid in range(GPU_INSTANCE_PROFILE_COUNT):
                for gi in _listed(
                    pynvml.c_nvmlGpuInstance_t,
                    "nvmlDeviceGetGpuInstances",
                    pynvml.nvmlDeviceGetGpuInstances,
                    handle,
                    pid,
                ):
                    info = nvml_call("nvmlGpuInstanceGetInfo", pynvml.nvmlGpuInstanceGetInfo, gi)
                    ci = self._compute_instance(pynvml, gi)
                    gid = int(info.id)
                    out.append(
                        NvmlMigInstance(
                            gpu_instance_id=gid,
                            profile_id=int(info.profileId),
                            start=int(info.placement.start),
                            size=int(info.placement.size),
                            compute_instance_id=ci,
                            mig_uuid=uuids.get((gid, ci), ("", None))[0] if ci is not None else "",
                            mig_index=uuids.get((gid, ci), ("", None))[1]
                            if ci is not None
                            else None,
                        )
                    )
            return sorted(out, key=lambda m: m.gpu_instance_id)

    def _compute_instances(self, pynvml: Any, gi: Any) -> list[Any]:
        """Every compute instance of GPU instance ``gi``, of any whole-instance profile."""
        return [
            ci
            for cpid in sorted(set(COMPUTE_PROFILE_FOR_SLICES.values()))
            for ci in _listed(
                pynvml.c_nvmlComputeInstance_t,
                "nvmlGpuInstanceGetComputeInstances",
                pynvml.nvmlGpuInstanceGetComputeInstances,
                gi,
                cpid,
            )
        ]

    def _compute_instance(self, pynvml: Any, gi: Any) -> int | None:
        for ci in self._compute_instances(pynvml, gi):
            info = nvml_call("nvmlComputeInstanceGetInfo", pynvml.nvmlComputeInstanceGetInfo, ci)
            return int(info.id)
        return None

    def _mig_uuids(self, pynvml: Any, handle: Any) -> dict[tuple[int, int], tuple[str, int]]:
        """``(GPU instance id, compute instance id)`` -> the MIG device's UUID and index."""
        out: dict[tuple[int, int], tuple[str, int]] = {}
        total = nvml_call(
            "nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle
        )
        for i in range(int(total)):
            try:
                mig = nvml_call(
                    "nvmlDeviceGetMigDeviceHandleByIndex",
                    pynvml.nvmlDeviceGetMigDeviceHandleByIndex,
                    handle,
                    i,
                )
            except NvmlError as exc:
                if exc.code in _ABSENT:
                    continue  # fewer MIG devices than the maximum
                raise
            gi = nvml_call("nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId, mig)
            ci = nvml_call(
                "nvmlDeviceGetComputeInstanceId", pynvml.nvmlDeviceGetComputeInstanceId, mig
            )
            uuid = str(nvml_call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, mig))
            out[(int(gi), int(ci))] = (uuid, i)
        return out

    def create_mig_instance(
        self, index: int, profile_id: int, start: int, size: int
    ) -> NvmlMigInstance:
        """Create a GPU instance of ``profile_id`` at ``(start, size)`` on GPU ``index``
        and one compute instance covering it; on a compute-instance failure the GPU
        instance is destroyed again (nothing is left half made).

        Raises:
            NvmlError: NVML refused (the placement is taken: INSUFFICIENT_RESOURCES).
        """
        with self._lock:
            self.start()
            import pynvml

            handle = self._handle(pynvml, index)
            info = nvml_call(
                "nvmlDeviceGetGpuInstanceProfileInfoV",
                pynvml.nvmlDeviceGetGpuInstanceProfileInfo,
                handle,
                profile_id,
            )
            placement = pynvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = start, size
            gi = nvml_call(
                "nvmlDeviceCreateGpuInstanceWithPlacement",
                pynvml.nvmlDeviceCreateGpuInstanceWithPlacement,
                handle,
                info.id,
                ctypes.byref(placement),
            )
            try:
                cpid = COMPUTE_PROFILE_FOR_SLICES.get(int(info.sliceCount))
                if cpid is None:
                    raise NvmlError(
                        "nvmlGpuInstanceCreateComputeInstance",
                        3,
                        f"no compute instance profile covers {info.sliceCount} slices",
                    )
                ci_info = nvml_call(
                    "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
                    pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                    gi,
                    cpid,
                    COMPUTE_ENGINE_SHARED,
                )
                nvml_call(
                    "nvmlGpuInstanceCreateComputeInstance",
                    pynvml.nvmlGpuInstanceCreateComputeInstance,
                    gi,
                    ci_info.id,
                )
            except NvmlError:
                nvml_call("nvmlGpuInstanceDestroy", pynvml.nvmlGpuInstanceDestroy, gi)
                raise
            gid = int(nvml_call("nvmlGpuInstanceGetInfo", pynvml.nvmlGpuInstanceGetInfo, gi).id)
        made = [m for m in self.mig_instances(index) if m.gpu_instance_id == gid]
        if not made or not made[0].mig_uuid:
            raise NvmlError("nvmlDeviceGetMigDeviceHandleByIndex", 6, "new MIG device not found")
        return made[0]

    def destroy_mig_instance(self, index: int, gpu_instance_id: int) -> None:
        """Destroy the compute instances of GPU instance ``gpu_instance_id`` of GPU
        ``index``, then the GPU instance; one already gone is no error."""
        with self._lock:
            self.start()
            import pynvml

            handle = self._handle(pynvml, index)
            try:
                gi = nvml_call(
                    "nvmlDeviceGetGpuInstanceById",
                    pynvml.nvmlDeviceGetGpuInstanceById,
                    handle,
                    gpu_instance_id,
                )
            except NvmlError as exc:
                if exc.code in _ABSENT:
                    return
                raise
            for ci in self._compute_instances(pynvml, gi):
                nvml_call("nvmlComputeInstanceDestroy", pynvml.nvmlComputeInstanceDestroy, ci)
            nvml_call("nvmlGpuInstanceDestroy", pynvml.nvmlGpuInstanceDestroy, gi)
