"""Reading a Cambricon request from a container spec, defaults applied (PROTOCOL.md §1).

Units: the memory resource counts units of 256 MiB (``cambricon.com/mlu.smlu.vmemory: 20``
is 5120 MiB); cores are percent of one MLU. The rules follow NVIDIA's (PROTOCOL.md §1)
where Cambricon has no reason to differ:

- each quantity is read from ``limits``, then ``requests``;
- memory unset (absent or 0) -> ``defaultMemory`` MiB (rounded up to whole units) if
  configured, else 100 percent of each chosen MLU;
- cores unset -> ``defaultCores``, and when that is 0 (the core's default) HAMi's 100:
  an sMLU that states memory but no ``vcore`` takes the MLU's compute exclusively, as
  HAMi 2.10 books it (``pkg/device/cambricon/device.go`` ``GenerateResourceRequests``
  sets cores 100 unless the vcore resource is present; its ``device_test.go``
  ``Test_GenerateResourceRequests`` "resourcememoryname don't set ..." expects cores 100
  with memory 1000 units). Sharing an MLU between memory slices needs an explicit
  ``vcore`` (or ``defaultCores``) below 100;
- memory or cores without a count -> ``defaultGPUNum`` MLUs.

Where Cambricon differs: a slice (memory or cores stated) takes exactly one MLU per
container. Cambricon's device plugin documents "vmemory and vcore can only work when
mlunum=1" (cambricon-k8s-device-plugin, dynamic-sMLU README) and its dynamic-sMLU
``Allocate`` creates one sMLU instance per allocation, so ``vmlu: 2`` with a
``vmemory`` is denied at admission rather than scheduled and then failed on the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from hami_core.backend import (
    INT32_MAX,
    DeviceRequest,
    InvalidInputError,
    ResourceNames,
    VendorConfig,
    read_quantity,
    resource_names,
)

from . import VENDOR, options
from .names import (
    DEFAULT_RESOURCES,
    GENERIC_MODEL,
    HAMI_DEFAULT_CORES,
    MEMORY_UNIT_MIB,
    qualified_name,
    qualified_name_pattern,
)

#: Largest memory quantity accepted, in units: the MiB value must fit HAMi's int32.
MAX_MEMORY_UNITS = INT32_MAX // MEMORY_UNIT_MIB


@attrs.frozen(kw_only=True)
class RawRequest:
    """The Cambricon quantities a container states, before defaults (None = not stated).

    Attributes:
        count: MLUs (``cambricon.com/vmlu``).
        memory_units: memory per MLU in units of 256 MiB.
        cores_pct: compute per MLU, percent.
        model: the model named by model-qualified resource names (``mlu370``), or None.
        memory_name / cores_name: the resource names the container used for memory and
            cores (the configured generic ones unless it used model-qualified ones).
    """

    count: int | None
    memory_units: int | None
    cores_pct: int | None
    model: str | None
    memory_name: str
    cores_name: str

    @property
    def empty(self) -> bool:
        return self.count is None and self.memory_units is None and self.cores_pct is None


def _stated_names(container: Mapping[str, Any]) -> set[str]:
    res = container.get("resources") or {}
    out: set[str] = set()
    for section in ("limits", "requests"):
        out.update((res.get(section) or {}).keys())
    return out


def accepts_qualified(config: VendorConfig) -> bool:
    """Whether model-qualified names (``cambricon.com/mlu370.smlu.vmemory``) are read."""
    return bool(config.options[options.ACCEPT_QUALIFIED])


def container_model(
    container: Mapping[str, Any], names: ResourceNames, config: VendorConfig
) -> tuple[str | None, str, str]:
    """The model a container names through model-qualified resources, and the memory and
    cores names it uses: ``(model or None, memory name, cores name)``.

    Raises:
        InvalidInputError: the container names two models, or mixes a model-qualified
            name with the generic one of the same kind.
    """
    if not accepts_qualified(config):
        return None, names.memory, names.cores
    pattern = qualified_name_pattern(names)
    cname = container.get("name", "?")
    models: set[str] = set()
    kinds: dict[str, str] = {}
    for key in sorted(_stated_names(container)):
        if key in (names.memory, names.cores):
            kind = "vmemory" if key == names.memory else "vcore"
            if kind in kinds and kinds[kind] != key:
                raise InvalidInputError(
                    f"container {cname!r}: both {kinds[kind]} and {key} are set; use one"
                )
            kinds[kind] = key
            continue
        m = pattern.match(key)
        if m is None or m.group("model").lower() == GENERIC_MODEL:
            continue
        models.add(m.group("model").lower())
        kind = m.group("kind")
        if kind in kinds and kinds[kind] != key:
            raise InvalidInputError(
                f"container {cname!r}: both {kinds[kind]} and {key} are set; use one"
            )
        kinds[kind] = key
    if len(models) > 1:
        raise InvalidInputError(
            f"container {cname!r}: model-qualified resources name several models "
            f"({', '.join(sorted(models))}); one container uses one MLU model"
        )
    model = next(iter(models), None)
    memory_name = kinds.get("vmemory") or (
        qualified_name(names, model, "vmemory") if model else names.memory
    )
    cores_name = kinds.get("vcore") or (
        qualified_name(names, model, "vcore") if model else names.cores
    )
    return model, memory_name, cores_name


def read_raw(
    container: Mapping[str, Any], names: ResourceNames, config: VendorConfig
) -> RawRequest:
    """Read the stated quantities of one container.

    Raises:
        InvalidInputError: a quantity is malformed, fractional, negative or too large
            (memory above 8388607 units, whose MiB would not fit int32; e.g. ``16Gi`` as a
            unit count), cores above 100, or the model-qualified names conflict; the
            message names the container, the resource and the value.
    """
    model, memory_name, cores_name = container_model(container, names, config)

    return RawRequest(
        count=read_quantity(container, names.count),
        memory_units=read_quantity(container, memory_name, maximum=MAX_MEMORY_UNITS),
        cores_pct=read_quantity(container, cores_name, maximum=100),
        model=model,
        memory_name=memory_name,
        cores_name=cores_name,
    )


def units_to_mib(units: int) -> int:
    """Memory units (256 MiB each) to MiB."""
    return units * MEMORY_UNIT_MIB


def mib_to_units(mib: int) -> int:
    """MiB to memory units, rounded up (a request never gets less than it asked)."""
    return -(-mib // MEMORY_UNIT_MIB)


def parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    """The container's Cambricon request with defaults, or None when it asks none.

    Returns:
        ``DeviceRequest`` for vendor ``MLU``: ``count`` distinct MLUs, ``memory_mib`` per
        MLU (a multiple of 256) or ``memory_pct`` 100 for whole MLUs, ``cores_pct``.

    Raises:
        InvalidInputError: malformed quantities (see ``read_raw``), a count of 0 with
            memory or cores, or a slice (memory or cores stated) over more than one MLU.
    """
    names = resource_names(DEFAULT_RESOURCES, config)
    raw = read_raw(container, names, config)
    if raw.empty:
        return None
    cname = container.get("name", "?")
    memory_mib = units_to_mib(raw.memory_units or 0)
    if raw.count == 0:
        if memory_mib or raw.cores_pct:
            raise InvalidInputError(
                f"container {cname!r}: {names.count} is 0 but memory or cores are requested"
            )
        return None
    count = raw.count if raw.count is not None else config.default_count
    sliced = bool(memory_mib) or (raw.cores_pct is not None and raw.cores_pct < 100)
    if sliced and count > 1:
        stated = raw.memory_name if memory_mib else raw.cores_name
        raise InvalidInputError(
            f"container {cname!r}: {names.count} is {count} with {stated} set; a Cambricon "
            f"sMLU slice takes exactly one MLU per container (set {names.count}: 1, or drop "
            "the memory and cores to get whole MLUs)"
        )
    memory_pct = 0
    whole_device = False
    if not memory_mib:
        if config.default_memory_mib:
            memory_mib = units_to_mib(mib_to_units(config.default_memory_mib))
        else:
            memory_pct, whole_device = 100, True
    if raw.cores_pct is not None:
        cores = raw.cores_pct
    elif whole_device:
        cores = HAMI_DEFAULT_CORES
    else:
        cores = config.default_cores_pct or HAMI_DEFAULT_CORES
    return DeviceRequest(
        vendor=VENDOR, count=count, memory_mib=memory_mib, memory_pct=memory_pct, cores_pct=cores
    )


def pod_models(pod: Mapping[str, Any], config: VendorConfig) -> frozenset[str]:
    """Models named by model-qualified resources in any container of the pod.

    ``hami_fit`` does not say which container a request belongs to, so the restriction is
    pod-wide: a pod that names ``mlu370`` in one container and ``mlu590`` in another may
    place either container on either model. Containers whose names conflict are skipped
    here (admission denies them).
    """
    names = resource_names(DEFAULT_RESOURCES, config)
    spec = pod.get("spec") or {}
    models: set[str] = set()
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            try:
                model, _, _ = container_model(container, names, config)
            except InvalidInputError:
                continue
            if model:
                models.add(model)
    return frozenset(models)
