"""Reading an Ascend request from a container spec, defaults applied (PROTOCOL.md §1).

Per model ``<x>`` the resources are ``huawei.com/<x>`` (chips), ``huawei.com/<x>-memory``
(MiB per chip) and ``huawei.com/<x>-core`` (percent of a chip). Rules, after HAMi 2.10
``pkg/device/ascend/device.go`` (``MutateAdmission``, ``GenerateResourceRequests``,
``trimMemory``) and the NVIDIA defaulting of PROTOCOL.md §1:

- quantities come from ``limits``, else ``requests``; malformed, fractional, negative or
  oversized ones (``16Gi`` as MiB) are refused;
- in ``template`` mode a stated memory is rounded **up** to the model's smallest vNPU
  template that holds it; above the largest template and up to ``memoryCapacity`` the
  request takes the whole chip; above ``memoryCapacity`` it is refused. In ``hami-core``
  mode (HAMi's soft slicing) the memory is used as stated;
- memory unset (absent or 0): ``defaultMemory`` if configured (rounded likewise), else
  the whole chip;
- cores unset: 100 (exclusive) for a whole chip, else ``defaultCores``; in ``template``
  mode a stated ``-core`` above 0 is refused (the template fixes compute; HAMi 2.10
  ``MutateAdmission``), except the value this webhook writes itself (100 on a whole
  chip, else ``defaultCores``);
- memory or cores without a count: ``defaultGPUNum`` chips;
- a slice takes one chip: a count above 1 with a slice is refused (HAMi: "vNPU not
  supported for multiple devices"; Ascend Docker Runtime creates a dynamic vNPU on one
  physical chip only);
- a model with modules of N chips (910C, N = 2) allocates whole modules: a count of 1
  becomes N, other counts must be multiples of N, slices are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from hami_core.backend import (
    DeviceRequest,
    InvalidInputError,
    VendorConfig,
    annotations_of,
    read_quantity,
    reads_pod_annotations,
)

from .models import MODE_HAMI_CORE, MODES, AscendSettings, ModelSpec, Template, settings
from .names import VNPU_MODE_ANNOTATION


@attrs.frozen(kw_only=True)
class RawRequest:
    """The quantities a container states for one model, before defaults (None = unset).

    Attributes:
        model: the model whose resources are named.
        count: chips.
        memory_mib: memory per chip, MiB.
        cores_pct: compute per chip, percent.
    """

    model: ModelSpec
    count: int | None
    memory_mib: int | None
    cores_pct: int | None


@attrs.frozen(kw_only=True)
class AscendRequest:
    """A container's Ascend request with defaults, rounding and module pairing applied.

    Attributes:
        model: the chip model (vendor key ``model.vendor``).
        mode: ``template`` or ``hami-core``.
        count: distinct chips.
        whole: True when each chip is taken whole.
        memory_mib: memory per chip when a slice, MiB (the template's memory in
            template mode); the model's ``memoryAllocatable`` when whole.
        template: the vNPU template of a slice in template mode, else None.
        cores_pct: compute per chip, percent.
    """

    model: ModelSpec
    mode: str
    count: int
    whole: bool
    memory_mib: int
    template: Template | None
    cores_pct: int

    def device_request(self) -> DeviceRequest:
        """The core's form: memory in MiB for a slice, 100 percent for a whole chip."""
        if self.whole:
            return DeviceRequest(
                vendor=self.model.vendor,
                count=self.count,
                memory_pct=100,
                cores_pct=self.cores_pct,
            )
        return DeviceRequest(
            vendor=self.model.vendor,
            count=self.count,
            memory_mib=self.memory_mib,
            cores_pct=self.cores_pct,
        )


def read_raw(container: Mapping[str, Any], model: ModelSpec) -> RawRequest | None:
    """The quantities a container states for ``model``, or None when it names none.

    Raises:
        InvalidInputError: a quantity is malformed, fractional, negative, above int32
            (memory ``16Gi`` as MiB) or a core percentage above 100; the message names
            the container, the resource and the value.
    """

    count = read_quantity(container, model.resource_count)
    memory = read_quantity(container, model.resource_memory)
    cores = read_quantity(container, model.resource_cores, maximum=100)
    if count is None and memory is None and cores is None:
        return None
    return RawRequest(model=model, count=count, memory_mib=memory, cores_pct=cores)


def stated(container: Mapping[str, Any], cfg: AscendSettings) -> RawRequest | None:
    """The one model a container names, or None.

    Raises:
        InvalidInputError: malformed quantities, or resources of two models in one
            container.
    """
    found = [r for m in cfg.models.values() if (r := read_raw(container, m)) is not None]
    if len(found) > 1:
        names = ", ".join(r.model.vendor for r in found)
        raise InvalidInputError(
            f"container {container.get('name', '?')!r}: asks for several Ascend models "
            f"({names}); one container takes chips of one model"
        )
    return found[0] if found else None


def pod_mode(pod: Mapping[str, Any], cfg: AscendSettings) -> str:
    """The pod's vNPU mode: its ``huawei.com/vnpu-mode`` annotation, else ``vnpuMode``.

    Raises:
        InvalidInputError: the annotation is neither ``template`` nor ``hami-core``.
    """
    value = annotations_of(pod).get(VNPU_MODE_ANNOTATION)
    if value is None:
        return cfg.mode
    mode = value.strip().lower()
    if mode not in MODES:
        raise InvalidInputError(
            f"annotation {VNPU_MODE_ANNOTATION}: {value!r} is not one of {', '.join(MODES)}"
        )
    return mode


def resolve(
    pod: Mapping[str, Any], container: Mapping[str, Any], cfg: AscendSettings
) -> AscendRequest | None:
    """The container's Ascend request with HAMi's defaults, or None when it asks none.

    Raises:
        InvalidInputError: see the module docstring; the message names the container,
            the resource and the value.
    """
    raw = stated(container, cfg)
    if raw is None:
        return None
    model, common = raw.model, cfg.common
    cname = container.get("name", "?")
    memory = raw.memory_mib or 0
    if raw.count == 0:
        if memory or raw.cores_pct:
            raise InvalidInputError(
                f"container {cname!r}: {model.resource_count} is 0 but memory or cores "
                "are requested"
            )
        return None
    mode = pod_mode(pod, cfg)
    count = raw.count if raw.count is not None else common.default_count
    if not memory:
        memory = common.default_memory_mib
    whole, template, charged = True, None, model.memory_allocatable_mib
    if memory:
        if memory > model.memory_capacity_mib:
            raise InvalidInputError(
                f"container {cname!r}: {model.resource_memory}: {memory} MiB is more than "
                f"one {model.vendor} chip holds ({model.memory_capacity_mib} MiB)"
            )
        if mode == MODE_HAMI_CORE:
            if memory < model.memory_allocatable_mib:
                whole, charged = False, memory
        else:
            sliced = model.trim(memory)
            if sliced is None:  # cannot happen: memory <= capacity always trims
                raise InvalidInputError(f"container {cname!r}: {model.resource_memory}: {memory}")
            whole, template, charged = sliced.whole, sliced.template, sliced.memory_mib
    n = model.chips_per_module
    if n > 1:
        if not whole:
            raise InvalidInputError(
                f"container {cname!r}: {model.vendor} chips are allocated in whole modules "
                f"of {n}; {model.resource_memory} slices are not supported (remove it to "
                "take whole chips)"
            )
        if count == 1:
            count = n
        elif count % n:
            raise InvalidInputError(
                f"container {cname!r}: {model.resource_count}: {model.vendor} takes whole "
                f"modules of {n} chips; ask 1 or a multiple of {n}, not {count}"
            )
    if count > 1 and not whole:
        raise InvalidInputError(
            f"container {cname!r}: a vNPU slice ({model.resource_memory}: {memory}) takes "
            f"one chip, but {model.resource_count} is {count}; ask 1 chip or whole chips"
        )
    written = 100 if whole else common.default_cores_pct
    if mode != MODE_HAMI_CORE and raw.cores_pct and raw.cores_pct != written:
        # A template vNPU's compute is fixed by its template: HAMi refuses a stated core
        # in hard split mode (Test_MutateAdmission_HardSplitCoreRejected). The value this
        # webhook itself writes (100 on a whole chip, else defaultCores) stays accepted,
        # so a mutated pod is admitted again unchanged.
        raise InvalidInputError(
            f"container {cname!r}: {model.resource_cores}: {raw.cores_pct} is only supported "
            f"in hami-core (soft split) mode; a template vNPU's compute is fixed by its "
            f"template (remove it, or annotate the pod {VNPU_MODE_ANNOTATION}: "
            f"{MODE_HAMI_CORE})"
        )
    if raw.cores_pct is not None:
        cores = raw.cores_pct
    elif whole:
        cores = 100
    else:
        cores = common.default_cores_pct
    return AscendRequest(
        model=model,
        mode=mode,
        count=count,
        whole=whole,
        memory_mib=charged,
        template=template,
        cores_pct=cores,
    )


@reads_pod_annotations(VNPU_MODE_ANNOTATION)
def parse_request(
    pod: Mapping[str, Any], container: Mapping[str, Any], config: VendorConfig
) -> DeviceRequest | None:
    """``hami_parse_request`` for Ascend: the core's ``DeviceRequest``, or None. Of the pod
    it reads the vNPU mode annotation only (``pod_mode``), so the core keeps its answer per
    container content and that annotation's value."""
    req = resolve(pod, container, settings(config))
    return None if req is None else req.device_request()
