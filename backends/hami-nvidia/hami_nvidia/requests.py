"""Reading an NVIDIA request from a container spec, defaults applied (PROTOCOL.md §1)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    DeviceRequest,
    InvalidInputError,
    ResourceNames,
    StatedRequest,
    VendorConfig,
    read_quantity,
    read_stated,
    resource_names,
)

from . import VENDOR
from .mig import PROFILE_KEY
from .names import DEFAULT_RESOURCES

#: The NVIDIA device plugin's MIG resources under its ``mixed`` strategy
#: (``nvidia.com/mig-<slices>g.<GB>gb``, with ``+me`` media-extension variants; NVIDIA's
#: k8s-device-plugin README, "MIG Support"). A container that names one gets an instance
#: of that profile; the webhook rewrites it to ``nvidia.com/gpu`` plus ``MIG_PROFILE_ENV``
#: (kubelet sees only the resource this device plugin advertises).
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb(?:\+me)?)$")
#: Where a container keeps the profile it named once the webhook rewrote the resource.
MIG_PROFILE_ENV = "HAMI_MIG_PROFILE"


def mig_resources(container: Mapping[str, Any]) -> dict[str, str]:
    """Resource name -> profile, for every ``nvidia.com/mig-<profile>`` the container's
    limits or requests name."""
    res = container.get("resources") or {}
    out = {}
    for part in ("limits", "requests"):
        for name in (res.get(part) or {}) if isinstance(res, Mapping) else ():
            m = MIG_RESOURCE.match(str(name))
            if m:
                out[str(name)] = m.group(1)
    return out


def _env_profile(container: Mapping[str, Any]) -> str | None:
    for e in container.get("env") or []:
        if isinstance(e, Mapping) and e.get("name") == MIG_PROFILE_ENV:
            return str(e.get("value") or "")
    return None


def _profile_request(
    container: Mapping[str, Any], raw: StatedRequest, names: ResourceNames, config: VendorConfig
) -> DeviceRequest | None:
    """The request of a container that names a MIG profile (a ``nvidia.com/mig-*``
    resource, or ``MIG_PROFILE_ENV`` after the webhook), else None (not one)."""
    cname = container.get("name", "?")
    migs = mig_resources(container)
    env_profile = _env_profile(container)
    if not migs and not env_profile:
        return None
    profiles = set(migs.values())
    if len(profiles) > 1:
        raise InvalidInputError(
            f"container {cname!r}: asks for several MIG profiles ({', '.join(sorted(migs))}); "
            "one container takes instances of one profile"
        )
    if migs:
        (profile,) = profiles
        if env_profile is not None and env_profile != profile:
            raise InvalidInputError(
                f"container {cname!r}: {MIG_PROFILE_ENV}={env_profile!r} contradicts "
                f"{next(iter(migs))}"
            )
        if raw.count is not None or raw.memory_mib or raw.memory_pct or raw.cores_pct:
            raise InvalidInputError(
                f"container {cname!r}: set either {next(iter(migs))} or {names.count} "
                "(with memory and cores), not both"
            )
        count = max(read_quantity(container, name) or 0 for name in migs)
    else:
        profile = str(env_profile)
        if not re.fullmatch(r"\d+g\.\d+gb(?:\+me)?", profile):
            raise InvalidInputError(
                f"container {cname!r}: {MIG_PROFILE_ENV}={profile!r} is not a MIG profile name"
            )
        count = raw.count if raw.count is not None else config.default_count
    if count == 0:
        return None
    return DeviceRequest(
        vendor=VENDOR, count=count, memory_mib=1, cores_pct=0, custom=((PROFILE_KEY, profile),)
    )


def parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    """The container's NVIDIA request with HAMi's defaults, or None when it asks none.

    Defaults (PROTOCOL.md §1): memory unset (``gpumem`` absent or 0 and
    ``gpumem-percentage`` absent or 0) -> ``defaultMemory`` MiB if configured, else 100
    percent of each device; cores unset -> 100 (exclusive) when neither memory
    resource is stated or ``gpumem-percentage`` is 100, else ``defaultCores`` (HAMi
    ``defaultExclusiveCoreIfNeeded``: a stated ``gpumem-percentage: 0`` or ``gpumem``
    is shareable); memory or cores without a count ->
    ``defaultGPUNum`` devices.

    A container naming a MIG profile (``nvidia.com/mig-<profile>: N``, the NVIDIA device
    plugin's mixed-strategy resources, or ``HAMI_MIG_PROFILE`` in its env once the webhook
    rewrote them) asks N instances of exactly that profile: ``custom`` carries it,
    memory is 1 MiB (the profile decides), cores 0.

    Raises:
        InvalidInputError: malformed quantities (see ``read_stated``), both ``gpumem`` and
            ``gpumem-percentage`` set, or a count of 0 with memory or cores; several
            MIG profiles in one container, or one with ``nvidia.com/gpu`` quantities.
    """
    names = resource_names(DEFAULT_RESOURCES, config)
    raw = read_stated(container, names)
    named = _profile_request(container, raw, names, config)
    if named is not None or mig_resources(container):
        return named
    if raw.empty:
        return None
    cname = container.get("name", "?")
    memory_mib = raw.memory_mib or 0
    memory_pct = raw.memory_pct or 0
    if memory_mib and memory_pct:
        raise InvalidInputError(
            f"container {cname!r}: set either {names.memory} or {names.memory_pct}, not both"
        )
    if raw.count == 0:
        if memory_mib or memory_pct or raw.cores_pct:
            raise InvalidInputError(
                f"container {cname!r}: {names.count} is 0 but memory or cores are requested"
            )
        return None
    count = raw.count if raw.count is not None else config.default_count
    if not memory_mib and not memory_pct:
        if config.default_memory_mib:
            memory_mib = config.default_memory_mib
        else:
            memory_pct = 100
    if raw.cores_pct is not None:
        cores = raw.cores_pct
    elif raw.memory_pct == 100 or (raw.memory_pct is None and raw.memory_mib is None):
        # HAMi's webhook (defaultExclusiveCoreIfNeeded) writes cores 100 when no cores are
        # stated and the memory is the whole device: gpumem-percentage: 100 (limits or
        # requests), or neither memory resource stated. A stated 0 (whole memory by
        # default) or a gpumem is shareable: defaultCores.
        cores = 100
    else:
        cores = config.default_cores_pct
    return DeviceRequest(
        vendor=VENDOR, count=count, memory_mib=memory_mib, memory_pct=memory_pct, cores_pct=cores
    )
