"""HAMi's scheduler ``device-config.yaml``, read as it is, translated to our versioned form.

HAMi's chart renders ConfigMap ``<release>-scheduler-device`` with one key,
``device-config.yaml``, holding one section per vendor: ``nvidia``, ``metax``, ``hygon``,
``cambricon``, ``mthreads``, ``iluvatars`` (a list), ``enflame``, ``kunlun``,
``awsneuron``, ``amd``, ``vastai``, ``biren``, ``vnpus`` (Ascend). Source: HAMi 2.10
``charts/hami/templates/scheduler/device-configmap.yaml`` and ``pkg/device/*`` config
structs. Our own format (``version: v1``) stays the documented one; this module only
turns a HAMi file into it:

- a key we implement is carried over (and validated by ``parse_config`` like any other);
- a key of HAMi's (``HAMI_KEYS``, HAMi's config structs) that we do not implement is one
  warning, except a resource-name key whose value is already the backend's own name:
  consistent, dropped silently;
- a key neither HAMi nor we know (a typo: ``deviceSplitCont``), a section HAMi does not
  have, or a section or entry of the wrong shape is a ``ConfigError`` naming it as the
  file writes it (``iluvatars[0].deviceSplitCont``): HAMi's own loader (``yaml.v2``
  ``Unmarshal``) drops such a key without a word, so the typo'd setting would silently
  keep its default;
- a section for a backend that is not installed is one warning.

The result is a plain mapping for ``parse_config``. A carried-over key with a bad value
stops the process at start like one of our own file, and the message names the key as
the HAMi file writes it (``spellings``: ``vnpus.configs[0].memoryAllocatable``, not our
``ascend.vnpus.Ascend910B3...``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from hami_core.errors import ConfigError, InvalidInputError
from hami_core.model import BackendInfo

from .documents import shown, shown_key

#: HAMi section -> our backend name.
SECTIONS: Final[dict[str, str]] = {
    "nvidia": "nvidia",
    "metax": "metax",
    "hygon": "hygon",
    "cambricon": "cambricon",
    "mthreads": "mthreads",
    "iluvatars": "iluvatar",
    "enflame": "enflame",
    "kunlun": "kunlun",
    "awsneuron": "awsneuron",
    "amd": "amd",
    "vastai": "vastai",
    "biren": "biren",
    "vnpus": "ascend",
    # HAMi 2.4.1-2.7.0 (``IluvatarConfig yaml:"iluvatar"``): one chip's mapping, the
    # per-chip ``iluvatars`` list since 2.7.1
    "iluvatar": "iluvatar",
}

#: Every key HAMi's scheduler reads in each section, in any release from 2.4 to 2.10 and
#: the master after it (``tests/fixtures/hami/device-config``: each release's chart
#: rendered; ``tests/compat/test_hami_chart_device_configs.py`` loads them all) (the
#: ``yaml`` tags of its config structs, ``pkg/device/<vendor>/{device,config}.go``
#: ``<Vendor>Config``; ``nvidia`` includes the inlined ``NodeDefaultConfig``): a file
#: HAMi's chart rendered for an earlier release must still start us. For ``iluvatars``
#: the keys of one list entry, for ``vnpus`` the section's own (``ascend.VNPUs``).
HAMI_KEYS: Final[dict[str, frozenset[str]]] = {
    "nvidia": frozenset(
        {
            "deviceSplitCount",
            "deviceMemoryScaling",
            "deviceCoreScaling",
            "preConfiguredDeviceMemory",
            "libCudaLogLevel",
            "enableNumaTopology",
            "resourceCountName",
            "resourceMemoryName",
            "resourceCoreName",
            "resourceMemoryPercentageName",
            "resourcePriorityName",
            "overwriteEnv",
            "defaultMemory",
            "defaultCores",
            "defaultGPUNum",
            "memoryFactor",
            "disableCoreLimit",
            "migProfileAllowlist",
            # HAMi 2.5-2.9 (``MigGeometriesList``), migProfileAllowlist's predecessor
            "knownMigGeometries",
            # the device plugin's per-node list (``json:"nodeconfig"``, its config.json),
            # which HAMi's docs (docs/develop/dynamic-mig.md) show in this section too;
            # HAMi's scheduler ignores it here, so do we (with a warning)
            "nodeconfig",
            "gpuCorePolicy",
            "runtimeClassName",
        }
    ),
    "metax": frozenset(
        {
            "resourceCountName",
            "resourceVCountName",
            "resourceVMemoryName",
            "resourceVCoreName",
            "sgpuTopologyAware",
        }
    ),
    "hygon": frozenset(
        {"resourceCountName", "resourceMemoryName", "resourceCoreName", "memoryFactor"}
    ),
    "cambricon": frozenset({"resourceCountName", "resourceMemoryName", "resourceCoreName"}),
    "mthreads": frozenset(
        # memoryPerCard: HAMi after 2.10 (``MthreadsConfig.MemoryPerCard``, chart default
        # ``[96]``), the card sizes in 512 MiB units (hami-mthreads' option of that name)
        {"resourceCountName", "resourceMemoryName", "resourceCoreName", "memoryPerCard"}
    ),
    "iluvatars": frozenset(
        {"commonWord", "chipName", "resourceCountName", "resourceMemoryName", "resourceCoreName"}
    ),
    "enflame": frozenset(
        {
            "resourceNameGCU",
            "resourceNameDRSGCU",
            "resourceNameGCUMemory",
            "resourceNameGCUCore",
            "resourceNameVGCU",
            "resourceNameVGCUPercentage",
            # HAMi 2.6 (``EnflameConfig`` before the GCU/DRS-GCU split)
            "resourceCountName",
            "resourcePercentageName",
            "resourceMemoryName",
            "resourceCoreName",
        }
    ),
    "kunlun": frozenset({"resourceCountName", "resourceVCountName", "resourceVMemoryName"}),
    "awsneuron": frozenset({"resourceCountName", "resourceCoreName"}),
    "amd": frozenset({"resourceCountName", "resourceMemoryName", "resourceCoreName"}),
    "vastai": frozenset({"resourceCountName"}),
    "biren": frozenset({"resourceCountName"}),
    "vnpus": frozenset({"hamiVnpuCore", "configs"}),
}
HAMI_KEYS["iluvatar"] = HAMI_KEYS["iluvatars"]

#: The keys of one ``vnpus.configs`` entry (HAMi ``pkg/device/ascend/vnpu.go``
#: ``VNPUConfig``).
HAMI_VNPU_ENTRY_KEYS: Final = frozenset(
    {
        "commonWord",
        "chipName",
        "resourceName",
        "resourceMemoryName",
        "resourceCoreName",
        "memoryAllocatable",
        "memoryCapacity",
        "memoryFactor",
        "aiCore",
        "aiCPU",
        "runtimeClassName",
        "overwriteEnv",
        "templates",
        "superPod",
    }
)

#: The generic keys every backend section reads (``hami_core.protocol.config``).
GENERIC_KEYS: Final = (
    "resourceCountName",
    "resourceMemoryName",
    "resourceMemoryPercentageName",
    "resourceCoreName",
    "deviceSplitCount",
    "deviceMemoryScaling",
    "deviceCoreScaling",
    "defaultMemory",
    "defaultCores",
    "defaultGPUNum",
)

#: HAMi key -> our option name, where the two differ (per HAMi section).
RENAMES: Final[dict[str, dict[str, str]]] = {
    "nvidia": {"gpuCorePolicy": "corePolicy"},
    # HAMi's kunlun count is the whole card; its "V" names are the shared slices
    "kunlun": {
        "resourceCountName": "resourceWholeCardName",
        "resourceVCountName": "resourceCountName",
        "resourceVMemoryName": "resourceMemoryName",
    },
}

#: HAMi's ``nvidia.disableCoreLimit`` (``pkg/device/nvidia/device.go``): true makes its
#: device plugin answer ``GPU_CORE_UTILIZATION_POLICY=disable``
#: (``pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go``), our ``corePolicy:
#: disable``.
CORE_LIMIT_SWITCH: Final = ("nvidia", "disableCoreLimit")
CORE_POLICY: Final = "corePolicy"

#: Resource names a backend uses outside its ``ResourceNames`` (HAMi key -> value).
FIXED_NAMES: Final[dict[str, dict[str, str]]] = {
    "nvidia": {"resourcePriorityName": "nvidia.com/priority"},
}

#: The chip whose ``superPod`` flag HAMi reads: modules of two chips when true.
SUPER_POD_CHIP: Final = "Ascend910C"

#: Keys of one ``vnpus.configs`` entry our Ascend backend reads.
_VNPU_ENTRY_KEYS: Final = (
    "chipName",
    "resourceName",
    "resourceMemoryName",
    "resourceCoreName",
    "memoryAllocatable",
    "memoryCapacity",
    "aiCore",
    "aiCPU",
    "templates",
)


def is_hami_device_config(data: object) -> bool:
    """True for a HAMi ``device-config.yaml`` document (or its ConfigMap): no
    ``version`` key and at least one HAMi vendor section."""
    data = unwrap_configmap(data)
    return isinstance(data, Mapping) and "version" not in data and any(k in SECTIONS for k in data)


def unwrap_configmap(data: object) -> object:
    """The ``device-config.yaml`` document inside a ConfigMap manifest, else ``data``."""
    if isinstance(data, Mapping) and data.get("kind") == "ConfigMap":
        inner = (data.get("data") or {}).get("device-config.yaml")
        if isinstance(inner, str):
            from . import documents

            try:
                return documents.load_yaml(inner, budget=documents.CONFIG_NODE_BUDGET)
            except InvalidInputError as exc:
                raise ConfigError(f"data.device-config.yaml: {exc}") from None
    return data


def translate(
    data: Mapping[str, Any], backends: Mapping[str, BackendInfo]
) -> tuple[dict[str, Any], list[str]]:
    """Our versioned configuration for a HAMi document, and the warnings.

    Args:
        data: the parsed ``device-config.yaml`` (or its ConfigMap).
        backends: the installed backends by name.

    Returns:
        ``({"version": "v1", <backend>: {...}}, ["nvidia.resourcePriorityName: ...", ...])``;
        one warning per HAMi key not implemented and per section of a backend not
        installed.

    Raises:
        ConfigError: a section HAMi does not have, a key neither HAMi's config structs
            (``HAMI_KEYS``) nor the backend know, a section or entry of the wrong shape;
            the message names the key as the file writes it (``nvidia.deviceSplitCont``,
            ``vnpus.configs[1].memoryAlocatable``).
    """
    doc = unwrap_configmap(data)
    out: dict[str, Any] = {"version": "v1"}
    warnings: list[str] = []
    if not isinstance(doc, Mapping):
        return out, warnings
    for key, section in doc.items():
        backend = SECTIONS.get(str(key))
        if backend is None:
            raise ConfigError(
                f"{shown_key(key)}: not a HAMi device-config section "
                f"(HAMi's: {', '.join(SECTIONS)})"
            )
        info = backends.get(backend)
        if info is None:
            warnings.append(
                f"{key}: backend {backend!r} is not installed (pip install hami-{backend}); "
                "section ignored"
            )
            continue
        if key == "vnpus":
            translated = _vnpus(section, info, warnings)
        elif key == "iluvatars":
            translated = _iluvatars(section, info, warnings)
        elif key == "iluvatar":
            translated = _iluvatars(
                None if section is None else [section], info, warnings, "iluvatar"
            )
        else:
            translated = _section(str(key), section, info, warnings)
        if translated:
            out[backend] = translated
    return out, warnings


def spellings(data: Mapping[str, Any], backends: Mapping[str, BackendInfo]) -> dict[str, str]:
    """How the HAMi document writes each key ``translate`` carries over: our key path
    (``kunlun.resourceCountName``, ``ascend.vnpus.Ascend910B3``) -> the path in the file
    (``kunlun.resourceVCountName``, ``vnpus.configs[0]``); sections map to sections
    (``iluvatar`` -> ``iluvatars``). Read by ``as_written``."""
    doc = unwrap_configmap(data)
    out: dict[str, str] = {}
    if not isinstance(doc, Mapping):
        return out
    for key, section in doc.items():
        backend = SECTIONS.get(str(key))
        if backend is None or backend not in backends:
            continue
        out[backend] = str(key)
        for theirs, ours in RENAMES.get(str(key), {}).items():
            out[f"{backend}.{ours}"] = f"{key}.{theirs}"
        if key == "vnpus" and isinstance(section, (Mapping, list)):
            configs, where = _vnpu_configs(section)
            for pos, entry in enumerate(configs if isinstance(configs, list) else []):
                if isinstance(entry, Mapping) and isinstance(entry.get("commonWord"), str):
                    out[f"{backend}.vnpus.{entry['commonWord']}"] = f"{where}[{pos}]"
                    if "runtimeClassName" in entry:
                        out[f"{backend}.runtimeClassName"] = f"{where}[{pos}].runtimeClassName"
    return out


def as_written(message: str, spelled: Mapping[str, str]) -> str:
    """``message``, which starts with the key it names as we spell it
    (``kunlun.resourceCountName: ...``), with that key as the file writes it (the longest
    path of ``spelled`` that the message starts with, as a whole path segment)."""
    for ours in sorted(spelled, key=len, reverse=True):
        if re.match(re.escape(ours) + r"(?=[.:\[ ]|$)", message):
            return spelled[ours] + message[len(ours) :]
    return message


def _own_names(info: BackendInfo) -> set[str]:
    names: set[str] = set()
    for t in info.device_types:
        r = t.resources
        names |= {n for n in (r.count, r.memory, r.memory_pct, r.cores, r.cores_alias) if n}
    return names


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    """``value`` as a mapping (YAML's empty ``nvidia:`` is None: no keys)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {shown(value)}")
    return value


def _unknown(where: str, hami: frozenset[str], ours: Sequence[str] = ()) -> ConfigError:
    extra = sorted(set(ours) - hami)
    also = f"; ours besides: {', '.join(extra)}" if extra else ""
    return ConfigError(f"{where}: unknown key (HAMi's keys: {', '.join(sorted(hami))}{also})")


def _section(key: str, section: object, info: BackendInfo, warnings: list[str]) -> dict[str, Any]:
    section = _mapping(section, key)
    renames = RENAMES.get(key, {})
    own = _own_names(info)
    single = len(info.device_types) == 1
    hami = HAMI_KEYS[key]
    ours = [
        *(k for k in GENERIC_KEYS if single or not k.startswith("resource")),
        *info.option_defaults,
    ]
    ours = [next((t for t, o in renames.items() if o == k), k) for k in ours]
    out: dict[str, Any] = {}
    core_off = False
    for k, v in section.items():
        name = renames.get(str(k), str(k))
        if (
            name in GENERIC_KEYS and (single or not name.startswith("resource"))
        ) or name in info.option_defaults:
            out[name] = v
        elif (key, k) == CORE_LIMIT_SWITCH and CORE_POLICY in info.option_defaults:
            if not isinstance(v, bool):
                raise ConfigError(f"{key}.{shown_key(k)}: expected true or false, got {shown(v)}")
            core_off = v
        elif k not in hami:
            raise _unknown(f"{key}.{shown_key(k)}", hami, ours)
        elif str(k).startswith("resource") and isinstance(v, str) and v in own:
            continue  # HAMi names the resource we already use: consistent
        elif FIXED_NAMES.get(key, {}).get(str(k)) == v:
            continue
        else:
            warnings.append(f"{key}.{shown_key(k)}: not implemented by hami-{info.name}; ignored")
    if core_off:  # HAMi sets GPU_CORE_UTILIZATION_POLICY=disable whatever gpuCorePolicy says
        out[CORE_POLICY] = "disable"
    return out


def _iluvatars(
    section: object, info: BackendInfo, warnings: list[str], name: str = "iluvatars"
) -> dict[str, Any]:
    """HAMi's per-chip list; our backend serves the four chips under HAMi's own names,
    so an entry naming them is consistent and anything else is not implemented.
    ``name="iluvatar"``: HAMi 2.4.1-2.7.0's single mapping, passed as a one-entry list and
    named in messages as the file writes it (``iluvatar.resourceCountNam``)."""
    if section is None:
        return {}
    if not isinstance(section, Sequence) or isinstance(section, str):
        raise ConfigError(f"iluvatars: expected a list, got {shown(section)}")

    def at(pos: int) -> str:
        return name if name == "iluvatar" else f"iluvatars[{pos}]"

    own = _own_names(info)
    known = {t.vendor for t in info.device_types}
    seen: set[str] = set()
    for pos, entry in enumerate(section):
        entry = _mapping(entry, at(pos))
        for k, v in entry.items():
            if k not in HAMI_KEYS["iluvatars"]:
                raise _unknown(f"{at(pos)}.{shown_key(k)}", HAMI_KEYS["iluvatars"])
            consistent = (str(k).startswith("resource") and v in own) or (
                k in ("chipName", "commonWord") and v in known
            )
            if not consistent and k not in seen:
                seen.add(str(k))
                where = name if name == "iluvatar" else "iluvatars[]"
                warnings.append(
                    f"{where}.{shown_key(k)}: not implemented by hami-{info.name}; ignored"
                )
    return {}


def _vnpus(section: object, info: BackendInfo, warnings: list[str]) -> dict[str, Any]:
    """``vnpus.configs`` (one entry per chip, keyed by ``commonWord``) onto our Ascend
    ``vnpus`` option, each entry merged over our default for that chip; a chip-level
    ``runtimeClassName`` becomes the backend's ``runtimeClassName``, ``hamiVnpuCore`` the
    backend's ``hamiVnpuCore``. HAMi 2.4-2.8's ``vnpus`` is the list of entries itself
    (``VNPUs []VNPUConfig``), read as ``configs`` and named ``vnpus[0]`` in messages."""
    configs, where = _vnpu_configs(section)
    section = {"configs": section} if isinstance(section, list) else _mapping(section, "vnpus")
    out: dict[str, Any] = {}
    for k in section:
        if k == "hamiVnpuCore" and k in info.option_defaults:
            # whether a node without a ``hami-vnpu-core`` annotation runs hami-core mode
            # (HAMi ``pkg/device/ascend/device.go`` ``Fit``, ``ModeNotFit``)
            out[k] = section[k]
        elif k not in HAMI_KEYS["vnpus"]:
            raise _unknown(f"vnpus.{shown_key(k)}", HAMI_KEYS["vnpus"])
        elif k != "configs":
            warnings.append(f"vnpus.{shown_key(k)}: not implemented by hami-{info.name}; ignored")
    if configs is not None and (not isinstance(configs, Sequence) or isinstance(configs, str)):
        raise ConfigError(f"{where}: expected a list, got {shown(configs)}")
    entries = [_mapping(e, f"{where}[{pos}]") for pos, e in enumerate(configs or [])]
    for pos, entry in enumerate(entries):
        for k in entry:
            if k not in HAMI_VNPU_ENTRY_KEYS:
                raise _unknown(f"{where}[{pos}].{shown_key(k)}", HAMI_VNPU_ENTRY_KEYS)
    defaults = info.option_defaults.get("vnpus")
    if not isinstance(defaults, Mapping):
        if section.get("configs"):
            warnings.append(f"{where}: not implemented by hami-{info.name}; ignored")
        return out
    vnpus = {name: dict(entry) for name, entry in defaults.items()}
    seen: set[str] = set()

    def once(message_key: str) -> None:
        if message_key not in seen:
            seen.add(message_key)
            warnings.append(
                f"{where}[].{message_key}: not implemented by hami-{info.name}; ignored"
            )

    for entry in entries:
        raw_word = entry.get("commonWord", "")
        word = raw_word if isinstance(raw_word, str) else ""
        if word not in vnpus:
            warnings.append(
                f"{where}: chip {shown(raw_word)} is not known to hami-{info.name}; ignored"
            )
            continue
        if word == SUPER_POD_CHIP:
            # HAMi pairs 910C chips into whole modules only with ``superPod: true``
            # (``pkg/device/ascend/device.go`` ``MutateAdmission``); without it a 910C
            # chip is sliced and counted like any other (``device_test.go``
            # ``Test_MutateAdmission910C_VNPUSplit``).
            vnpus[word]["chipsPerModule"] = 2 if entry.get("superPod") is True else 1
        for k, v in entry.items():
            if k in _VNPU_ENTRY_KEYS:
                vnpus[word][str(k)] = v
            elif k == "superPod":
                continue
            elif k == "runtimeClassName" and "runtimeClassName" in info.option_defaults:
                if v:
                    out["runtimeClassName"] = v
            elif k != "commonWord":
                once(shown_key(k))
    out["vnpus"] = vnpus
    return out


def _vnpu_configs(section: object) -> tuple[object, str]:
    """The ``vnpus`` entries and how the file names their list: ``vnpus.configs`` (HAMi
    2.9+, ``ascend.VNPUs``) or ``vnpus`` itself (HAMi 2.4-2.8, ``[]VNPUConfig``)."""
    if isinstance(section, list):
        return section, "vnpus"
    if isinstance(section, Mapping):
        return section.get("configs"), "vnpus.configs"
    return None, "vnpus.configs"
