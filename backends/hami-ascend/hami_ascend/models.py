"""Ascend chip models, their vNPU templates and this backend's settings.

The defaults (``vnpus.toml``, one entry per model, read through the checks a
configuration's override goes through) are HAMi 2.10's ``vnpus`` table (chart
``charts/hami/templates/scheduler/device-configmap.yaml``, Project-HAMi/HAMi): per model
the common word (our vendor key), the ``npu-smi`` chip name, the schedulable memory
(``memoryAllocatable``, MiB), the physical memory (``memoryCapacity``, MiB), the AI Core
count and the vNPU templates (name, MiB, AI Cores); the resource names follow from the
common word. The template names are the values of
``ASCEND_VNPU_SPECS`` that Ascend Docker Runtime accepts for dynamic vNPU creation
(MindCluster "Ascend Docker Runtime 使用指南 / 在Docker客户端使用", table 1).

Every field is overridable per model through the backend option ``vnpus``
(``{Ascend910B3: {templates: [...]}}``), using HAMi's key names; a field not given keeps
its default. Models cannot be added by configuration: each vendor key is declared to the
core when the backend loads (``hami_backend_info``), before any configuration is read.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from importlib.resources import files
from typing import Any, Final

import attrs

from hami_core.backend import ConfigError, VendorConfig, is_extended_resource_name

#: ``vnpuMode`` values: hardware vNPU templates, or HAMi's soft slicing (libvnpu).
MODE_TEMPLATE: Final = "template"
MODE_HAMI_CORE: Final = "hami-core"
MODES: Final = (MODE_TEMPLATE, MODE_HAMI_CORE)


@attrs.frozen(kw_only=True)
class Template:
    """A vNPU template: a fixed slice of one chip the driver can create.

    Attributes:
        name: the template name, e.g. ``vir05_1c_16g`` (the ``ASCEND_VNPU_SPECS`` value).
        memory_mib: device memory of the slice, MiB.
        ai_core: AI Cores of the slice.
        ai_cpu: AI CPUs of the slice.
    """

    name: str
    memory_mib: int
    ai_core: int = 0
    ai_cpu: int = 0


@attrs.frozen(kw_only=True)
class Slice:
    """What a memory request becomes on one chip after rounding up to a template.

    Attributes:
        memory_mib: the memory charged, MiB: the template's memory, or the model's
            ``memoryAllocatable`` for a whole chip.
        template: the template, or None for a whole chip.
    """

    memory_mib: int
    template: Template | None

    @property
    def whole(self) -> bool:
        """True when the request takes the whole chip."""
        return self.template is None


@attrs.frozen(kw_only=True)
class ModelSpec:
    """One Ascend chip model, i.e. one vendor key of this backend.

    Attributes:
        vendor: the HAMi common word and our vendor key, e.g. ``Ascend910B3``.
        chip_name: the chip name ``npu-smi`` prints, e.g. ``910B3`` (``310P3`` for the
            Ascend310P key, ``Ascend910`` for 910C modules).
        resource_count, resource_memory, resource_cores: extended-resource names; by
            default HAMi's ``huawei.com/<vendor>``, ``huawei.com/<vendor>-memory``,
            ``huawei.com/<vendor>-core``.
        memory_allocatable_mib: schedulable memory of one chip, MiB (HAMi
            ``memoryAllocatable``; what the inventory states as ``devmem``).
        memory_capacity_mib: largest memory a request may state, MiB (HAMi
            ``memoryCapacity``); a request above the largest template and up to this
            takes the whole chip.
        ai_core: AI Cores of one chip. HAMi's device plugin registers this number as
            ``devcore`` in template mode (``AdvertisedDevcore``); fit reads such a
            ``devcore`` as the whole chip (100 %).
        ai_cpu: AI CPUs of one chip.
        templates: the vNPU templates, smallest memory first.
        chips_per_module: chips that are only allocated together (2 for 910C modules,
            HAMi ``MutateAdmission``: a request of 1 becomes 2, odd counts are refused).
        hccs_group_size: chips per HCCS interconnect group, by device index (4 on Atlas
            800 A2-style 8-chip servers: HAMi's ascend-device-plugin gives indexes 0-3
            NetworkID 0 and 4-7 NetworkID 1); 0 when every chip is linked to every other.
    """

    vendor: str
    chip_name: str
    resource_count: str = attrs.field(
        default=attrs.Factory(lambda m: f"huawei.com/{m.vendor}", takes_self=True)
    )
    resource_memory: str = attrs.field(
        default=attrs.Factory(lambda m: f"huawei.com/{m.vendor}-memory", takes_self=True)
    )
    resource_cores: str = attrs.field(
        default=attrs.Factory(lambda m: f"huawei.com/{m.vendor}-core", takes_self=True)
    )
    memory_allocatable_mib: int
    memory_capacity_mib: int
    ai_core: int
    ai_cpu: int = 0
    templates: tuple[Template, ...] = ()
    chips_per_module: int = 1
    hccs_group_size: int = 0

    def trim(self, memory_mib: int) -> Slice | None:
        """Round a stated memory (MiB, > 0) up to this model's vNPU template.

        HAMi's ``trimMemory``: the smallest template holding ``memory_mib``; above the
        largest template and up to ``memory_capacity_mib``, the whole chip
        (``memory_allocatable_mib``); above that, None (the request is invalid).
        """
        for t in self.templates:
            if memory_mib <= t.memory_mib:
                return Slice(memory_mib=t.memory_mib, template=t)
        if memory_mib <= self.memory_capacity_mib:
            return Slice(memory_mib=self.memory_allocatable_mib, template=None)
        return None

    def template_of(self, memory_mib: int) -> Template | None:
        """The template whose memory is exactly ``memory_mib`` MiB, or None."""
        return next((t for t in self.templates if t.memory_mib == memory_mib), None)

    @property
    def template_split_count(self) -> int:
        """Most vNPUs one chip holds in template mode: allocatable memory over the
        smallest template (HAMi ascend-device-plugin ``VDeviceCount``); 1 without
        templates."""
        if not self.templates:
            return 1
        return max(1, self.memory_allocatable_mib // self.templates[0].memory_mib)

    def chip_matches(self, name: str) -> bool:
        """Whether an ``npu-smi`` chip name (``910B3``, ``Ascend 910B3``, ``Ascend910``)
        is this model's chip; case and an ``Ascend`` prefix are ignored."""
        return normalize_chip_name(name) == normalize_chip_name(self.chip_name)


def normalize_chip_name(name: str) -> str:
    """``"Ascend 910B3"`` -> ``"910B3"``: upper case, no spaces, no ``ASCEND`` prefix."""
    flat = "".join(name.split()).upper()
    return flat.removeprefix("ASCEND")


#: HAMi key name -> (ModelSpec attribute, type).
_MODEL_KEYS: Final[dict[str, tuple[str, type]]] = {
    "chipName": ("chip_name", str),
    "resourceName": ("resource_count", str),
    "resourceMemoryName": ("resource_memory", str),
    "resourceCoreName": ("resource_cores", str),
    "memoryAllocatable": ("memory_allocatable_mib", int),
    "memoryCapacity": ("memory_capacity_mib", int),
    "aiCore": ("ai_core", int),
    "aiCPU": ("ai_cpu", int),
    "chipsPerModule": ("chips_per_module", int),
    "hccsGroupSize": ("hccs_group_size", int),
}


def _fields(entry: object, *, vendor: str, where: str) -> dict[str, Any]:
    """The ``ModelSpec`` fields one ``vnpus`` entry states, from HAMi's key names, each
    of the right type (``templates`` parsed and sorted)."""
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {entry!r}")
    fields: dict[str, Any] = {}
    for key, value in entry.items():
        if key == "templates":
            fields["templates"] = _templates(value, where=f"{where}.templates")
        elif key == "commonWord":
            if value != vendor:
                raise ConfigError(f"{where}.commonWord: must be {vendor!r}, got {value!r}")
        elif key not in _MODEL_KEYS:
            allowed = ", ".join([*_MODEL_KEYS, "templates"])
            raise ConfigError(f"{where}.{key}: unknown key (allowed: {allowed})")
        else:
            attr, kind = _MODEL_KEYS[key]
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ConfigError(f"{where}.{key}: expected {kind.__name__}, got {value!r}")
            fields[attr] = value
    return fields


def _checked(model: ModelSpec, *, where: str) -> ModelSpec:
    """``model`` when its numbers are consistent (memory, cores, module and group sizes
    in range, no template larger than the chip)."""
    checks = (
        ("memoryAllocatable", model.memory_allocatable_mib > 0),
        ("memoryCapacity", model.memory_capacity_mib >= model.memory_allocatable_mib),
        ("aiCore", model.ai_core >= 0),
        ("aiCPU", model.ai_cpu >= 0),
        ("chipsPerModule", model.chips_per_module >= 1),
        ("hccsGroupSize", model.hccs_group_size >= 0),
    )
    for key, ok in checks:
        if not ok:
            raise ConfigError(
                f"{where}.{key}: value {getattr(model, _MODEL_KEYS[key][0])!r} is out of range"
            )
    for key in ("resourceName", "resourceMemoryName", "resourceCoreName"):
        name = getattr(model, _MODEL_KEYS[key][0])
        if not is_extended_resource_name(name):
            raise ConfigError(
                f"{where}.{key}: {name!r} is not a Kubernetes extended resource name "
                "(domain/name outside kubernetes.io, e.g. example.com/npu)"
            )
    for t in model.templates:
        if t.memory_mib > model.memory_allocatable_mib:
            raise ConfigError(
                f"{where}.templates: {t.name} ({t.memory_mib} MiB) is larger than "
                f"memoryAllocatable ({model.memory_allocatable_mib} MiB)"
            )
        for key, theirs, chip in (
            ("aiCore", t.ai_core, model.ai_core),
            ("aiCPU", t.ai_cpu, model.ai_cpu),
        ):
            # 0 on the chip: the count is not stated, nothing to compare
            if chip and theirs > chip:
                raise ConfigError(
                    f"{where}.templates: {t.name} ({key} {theirs}) is larger than the "
                    f"chip's {key} ({chip})"
                )
    return model


def _merge(model: ModelSpec, override: object, *, where: str) -> ModelSpec:
    """``model`` with a configuration's ``vnpus.<vendor>`` entry applied, checked."""
    fields = _fields(override, vendor=model.vendor, where=where)
    return _checked(attrs.evolve(model, **fields), where=where)


def _template(item: object, *, where: str) -> Template:
    if not isinstance(item, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {item!r}")
    unknown = set(item) - {"name", "memory", "aiCore", "aiCPU"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    name, memory = item.get("name"), item.get("memory")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name: expected a non-empty string, got {name!r}")
    if not isinstance(memory, int) or isinstance(memory, bool) or memory <= 0:
        raise ConfigError(f"{where}.memory: expected a positive integer (MiB), got {memory!r}")
    cores = {k: item.get(k, 0) for k in ("aiCore", "aiCPU")}
    for k, v in cores.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ConfigError(f"{where}.{k}: expected a non-negative integer, got {v!r}")
    return Template(name=name, memory_mib=memory, ai_core=cores["aiCore"], ai_cpu=cores["aiCPU"])


def _templates(value: object, *, where: str) -> tuple[Template, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list, got {value!r}")
    out = [_template(item, where=f"{where}[{pos}]") for pos, item in enumerate(value)]
    # HAMi sorts the templates by memory (InitDevices); rounding up depends on it.
    return tuple(sorted(out, key=lambda t: (t.memory_mib, t.name)))


def _default_models() -> tuple[ModelSpec, ...]:
    """The models of ``vnpus.toml`` (HAMi's table), read through the checks a
    configuration's override goes through."""
    table = tomllib.loads(files(__package__).joinpath(_TABLE).read_text("utf-8"))
    out = []
    for entry in table["vnpus"]:
        vendor, where = str(entry["commonWord"]), f"{_TABLE}: {entry['commonWord']}"
        fields = _fields(entry, vendor=vendor, where=where)
        out.append(_checked(ModelSpec(vendor=vendor, **fields), where=where))
    return tuple(out)


#: The file of the default models, next to this module.
_TABLE: Final = "vnpus.toml"
#: HAMi 2.10's defaults (``vnpus.toml``), in declaration order.
DEFAULT_MODELS: Final[tuple[ModelSpec, ...]] = _default_models()


def model_as_option(model: ModelSpec) -> dict[str, Any]:
    """A model in the configuration's form (HAMi's ``vnpus`` key names)."""
    out: dict[str, Any] = {key: getattr(model, attr) for key, (attr, _) in _MODEL_KEYS.items()}
    out["templates"] = [
        {"name": t.name, "memory": t.memory_mib, "aiCore": t.ai_core, "aiCPU": t.ai_cpu}
        for t in model.templates
    ]
    return out


#: Backend-specific configuration keys (``BackendInfo.option_defaults``).
OPTION_DEFAULTS: Final[dict[str, Any]] = {
    # Default vNPU mode of pods without a huawei.com/vnpu-mode annotation.
    "vnpuMode": MODE_TEMPLATE,
    # Whether a node without a hami-vnpu-core annotation runs hami-core mode (HAMi's
    # vnpus.hamiVnpuCore); true anyway when vnpuMode is hami-core.
    "hamiVnpuCore": False,
    # RuntimeClass set on admitted pods that name none ("" = leave the pod alone).
    "runtimeClassName": "",
    # Host directory of HAMi's soft-slicing runtime (hami-core mode mounts).
    "hookPath": "/usr/local/hami-vnpu-core",
    # The npu-smi binary used by discovery.
    "npuSmiPath": "npu-smi",
    # Per-model overrides, keyed by vendor key, HAMi's key names; defaults shown.
    "vnpus": {m.vendor: model_as_option(m) for m in DEFAULT_MODELS},
}


@attrs.frozen(kw_only=True)
class AscendSettings:
    """This backend's configuration section, validated.

    Attributes:
        mode: default vNPU mode (``template`` or ``hami-core``).
        hami_core_nodes: whether a node without a ``hami-vnpu-core`` annotation runs
            hami-core mode (``hamiVnpuCore``, or ``vnpuMode`` hami-core).
        runtime_class_name: RuntimeClass to set on admitted pods, or "".
        hook_path: host directory of the soft-slicing runtime.
        npu_smi: the ``npu-smi`` executable.
        models: vendor key -> model, declaration order.
        common: the common per-vendor keys (split count, defaults, ...).
    """

    mode: str
    runtime_class_name: str
    hami_core_nodes: bool
    hook_path: str
    npu_smi: str
    models: Mapping[str, ModelSpec]
    common: VendorConfig

    def model(self, vendor: str) -> ModelSpec | None:
        """The model of a vendor key, or None when the key is not Ascend's."""
        return self.models.get(vendor)


def parse_settings(config: VendorConfig) -> AscendSettings:
    """Validate this backend's section (``hami_check_config``): complete, as the
    ``BackendManager`` hands it (``options`` merged with ``OPTION_DEFAULTS``).

    Raises:
        ConfigError: an unknown model or key under ``vnpus``, a value of the wrong type,
            a template list that is not a list of ``{name, memory}`` mappings, a
            resource name that is not an extended resource name or is another model's
            (or another of its own), or an unknown ``vnpuMode``; the message names
            ``ascend.<key>``.
    """
    options = config.options
    mode = parse_mode(str(options["vnpuMode"]), where="ascend.vnpuMode")
    overrides = options["vnpus"]
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"ascend.vnpus: expected a mapping, got {overrides!r}")
    known = {m.vendor: m for m in DEFAULT_MODELS}
    for vendor in overrides:
        if vendor not in known:
            raise ConfigError(f"ascend.vnpus.{vendor}: unknown model (known: {', '.join(known)})")
    models = {
        vendor: _merge(model, overrides.get(vendor) or {}, where=f"ascend.vnpus.{vendor}")
        for vendor, model in known.items()
    }
    owner: dict[str, str] = {}
    for vendor, model in models.items():
        for key, name in (
            ("resourceName", model.resource_count),
            ("resourceMemoryName", model.resource_memory),
            ("resourceCoreName", model.resource_cores),
        ):
            if name in owner:
                # one name read as two resources: a request would be counted twice
                raise ConfigError(
                    f"ascend.vnpus.{vendor}.{key}: {name!r} is already {owner[name]}'s"
                )
            owner[name] = f"ascend.vnpus.{vendor}.{key}"
    hami_core_nodes = options["hamiVnpuCore"]
    if not isinstance(hami_core_nodes, bool):
        raise ConfigError(f"ascend.hamiVnpuCore: expected true or false, got {hami_core_nodes!r}")
    return AscendSettings(
        mode=mode,
        runtime_class_name=str(options["runtimeClassName"]),
        hami_core_nodes=hami_core_nodes or mode == MODE_HAMI_CORE,
        hook_path=str(options["hookPath"]).rstrip("/") or "/",
        npu_smi=str(options["npuSmiPath"]),
        models=models,
        common=config,
    )


def settings(config: VendorConfig) -> AscendSettings:
    """The section as ``parse_settings`` read it when the configuration was loaded.

    Raises:
        TypeError: the section did not come through ``hami_check_config`` (build one
            with ``BackendManager`` or ``hami_core.testing.section``).
    """
    if not isinstance(config.settings, AscendSettings):
        raise TypeError("the ascend section was not checked by hami_check_config")
    return config.settings


def parse_mode(value: str, *, where: str) -> str:
    """``template`` / ``hami-core`` (HAMi also accepts ``hamiCore``), case-insensitive.

    Raises:
        ConfigError: any other value.
    """
    mode = value.strip().lower()
    if mode == "hamicore":
        mode = MODE_HAMI_CORE
    if mode not in MODES:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(MODES)}")
    return mode
