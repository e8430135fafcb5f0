"""The configuration file: versioned YAML with per-backend sections.

Example (every key optional; these are the defaults)::

    version: v1
    schedulerName: hami-scheduler
    defaultSchedulerPolicy:
      nodeSchedulerPolicy: binpack    # binpack | spread
      gpuSchedulerPolicy: spread      # binpack | spread | topology-aware | numa
    nodeLockExpirySeconds: 300
    forceOverwriteDefaultScheduler: true  # take pods of default-scheduler (HAMi's flag)
    nvidia:                           # one section per backend, named as its entry point
      resourceCountName: nvidia.com/gpu
      resourceMemoryName: nvidia.com/gpumem
      resourceMemoryPercentageName: nvidia.com/gpumem-percentage
      resourceCoreName: nvidia.com/gpucores
      deviceSplitCount: 10
      deviceMemoryScaling: 1
      deviceCoreScaling: 1
      defaultMemory: 0                # MiB; 0 = the whole device
      defaultCores: 0                 # percent
      defaultGPUNum: 1

Key names follow HAMi's ``device-config.yaml`` so a HAMi user recognises them. Unknown
keys and bad values are errors that name the key (``nvidia.deviceSplitCount``).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import yaml

from hami_core.errors import ConfigError, InvalidInputError
from hami_core.model import BackendInfo, DevicePolicy, DevicePolicyChain, NodePolicy

from . import documents, hamiconfig
from .documents import shown, shown_key, shown_message
from .quantity import INT32_MAX

log = logging.getLogger(__name__)

CONFIG_VERSION: Final = "v1"
#: Most containers one device may be shared by (``deviceSplitCount``). Each share is one
#: device ID the device plugin lists to kubelet (ListAndWatch) per device, so the count
#: multiplies what kubelet tracks; HAMi's default is 10, and a CUDA context alone takes
#: hundreds of MiB, so no GPU holds anywhere near this many sharers.
MAX_SPLIT_COUNT: Final = 1000
DEFAULT_SCHEDULER_NAME: Final = "hami-scheduler"


@attrs.frozen(kw_only=True)
class VendorConfig:
    """One backend's section. Resource names of "" mean the backend's own defaults.

    Attributes:
        resource_count_name, resource_memory_name, resource_memory_pct_name,
        resource_cores_name: overrides of the extended-resource names.
        split_count: max containers sharing one device (``deviceSplitCount``).
        memory_scaling: factor applied to physical memory in the inventory; > 1
            oversubscribes (``deviceMemoryScaling``).
        core_scaling: factor applied to the 100 percent of compute (``deviceCoreScaling``).
        default_memory_mib: memory per device when a request names none; 0 = whole device.
        default_cores_pct: cores per device when a request names none.
        default_count: devices for a request that names memory or cores but no count.
        operating_mode: the node's ``operatingmode`` on a device plugin (``hami-core``,
            ``mig``, ``mps``; "" where no per-node file says), so discovery knows it.
        mig_strategy: the node's ``migstrategy`` on a device plugin (``none``,
            ``single``, ``mixed``: the NVIDIA device plugin's; "" where no per-node
            file says); ``single`` makes each MIG instance a device of its own.
        options: backend-specific keys, always complete: the backend's
            ``option_defaults`` overlaid with what the file states.
        settings: the backend's own parsed form of the section, as its
            ``hami_check_config`` returned it when the ``BackendManager`` loaded the
            configuration (None for a backend without that hook).
    """

    resource_count_name: str = ""
    resource_memory_name: str = ""
    resource_memory_pct_name: str = ""
    resource_cores_name: str = ""
    split_count: int = 10
    memory_scaling: float = 1.0
    core_scaling: float = 1.0
    default_memory_mib: int = 0
    default_cores_pct: int = 0
    default_count: int = 1
    operating_mode: str = ""
    mig_strategy: str = ""
    options: Mapping[str, Any] = attrs.field(factory=dict)
    settings: object = attrs.field(default=None, eq=False, repr=False)

    @classmethod
    def defaults(cls, info: BackendInfo) -> VendorConfig:
        """The section of a backend whose file states nothing: common defaults and the
        backend's ``option_defaults``."""
        return cls(options=dict(info.option_defaults))


@attrs.frozen(kw_only=True)
class HamiConfig:
    """The whole configuration; ``vendor(name)`` gives a backend's section."""

    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    node_policy: NodePolicy = NodePolicy.BINPACK
    device_policy: DevicePolicy = DevicePolicy.SPREAD
    #: the whole default device policy when it is a HAMi 2.10 list or names ``mutex``.
    device_policy_chain: DevicePolicyChain | None = None
    node_lock_expiry_s: float = 300.0
    #: whether the webhook takes a pod whose ``schedulerName`` is ``default-scheduler``
    #: (sets ours); False leaves such a pod to kube's default scheduler, so only pods
    #: naming ours (or none) are ours. HAMi's ``--force-overwrite-default-scheduler``
    #: (``cmd/scheduler/main.go``, default true; ``pkg/scheduler/webhook.go`` ``Handle``).
    force_overwrite_default_scheduler: bool = True
    vendors: Mapping[str, VendorConfig] = attrs.field(factory=dict)
    #: the file the configuration was read from ("" for defaults or a parsed document).
    source: str = attrs.field(default="", eq=False)
    #: our key path -> the path as the file writes it, for a HAMi ``device-config.yaml``
    #: (``hamiconfig.spellings``); empty for our own format.
    spelled: Mapping[str, str] = attrs.field(factory=dict, eq=False)

    def located(self, message: str) -> str:
        """A message naming a key of this configuration (``nvidia.corePolicy: ...``) as
        the file writes it, after the file's path: what a backend's
        ``hami_check_config`` raises, shown as ``load_config`` shows its own errors."""
        message = hamiconfig.as_written(message, self.spelled)
        return shown_message(f"{self.source}: {message}" if self.source else message)

    def vendor(self, backend: str) -> VendorConfig:
        """The section of ``backend`` as the file states it (common defaults when the file
        has none). Hooks receive ``BackendManager.vendor_config`` instead: merged with the
        backend's option defaults and checked."""
        return self.vendors.get(backend) or VendorConfig()


# YAML key -> (attribute, type, check)
_VENDOR_KEYS: Final[dict[str, tuple[str, type]]] = {
    "resourceCountName": ("resource_count_name", str),
    "resourceMemoryName": ("resource_memory_name", str),
    "resourceMemoryPercentageName": ("resource_memory_pct_name", str),
    "resourceCoreName": ("resource_cores_name", str),
    "deviceSplitCount": ("split_count", int),
    "deviceMemoryScaling": ("memory_scaling", float),
    "deviceCoreScaling": ("core_scaling", float),
    "defaultMemory": ("default_memory_mib", int),
    "defaultCores": ("default_cores_pct", int),
    "defaultGPUNum": ("default_count", int),
}
_RESOURCE_NAME_KEYS: Final = (
    "resourceCountName",
    "resourceMemoryName",
    "resourceMemoryPercentageName",
    "resourceCoreName",
)
# A qualified name (apimachinery validation.IsQualifiedName): a DNS-1123 subdomain prefix
# of at most 253 characters, "/", a name of at most 63 alphanumerics, '-', '_', '.'
# starting and ending alphanumeric.
_QUALIFIED_NAME: Final = re.compile(
    r"(?=.{1,253}/)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
_TOP_KEYS: Final = (
    "version",
    "schedulerName",
    "defaultSchedulerPolicy",
    "nodeLockExpirySeconds",
    "forceOverwriteDefaultScheduler",
)


def load_config(path: str | Path | None, *, backends: Mapping[str, BackendInfo]) -> HamiConfig:
    """Load a configuration file; ``None`` gives the defaults.

    Args:
        path: the YAML file.
        backends: the installed backends by name; their names are the allowed sections
            and their ``option_defaults`` the allowed backend-specific keys.

    A HAMi scheduler ``device-config.yaml`` (no ``version``, HAMi's vendor sections) is
    accepted as it is: translated by ``hamiconfig``, one warning logged per key of HAMi's
    we do not implement; a key HAMi does not have either (a typo) is an error.

    Raises:
        ConfigError: unreadable file, wrong ``version``, unknown key or bad value; the
            message names the file and the key as the file writes it (a HAMi file's
            ``kunlun.resourceVCountName``, not our ``kunlun.resourceCountName``).
    """
    if path is None:
        return parse_config({"version": CONFIG_VERSION}, backends=backends)
    data = read_config_document(path)
    spelled: dict[str, str] = {}
    try:
        hami_document = hamiconfig.is_hami_device_config(data)
    except ConfigError as exc:  # a ConfigMap whose embedded document is malformed
        raise ConfigError(shown_message(f"{path}: {exc}")) from None
    if hami_document:
        # HAMi's scheduler device-config.yaml as it is (PROTOCOL.md §1b)
        spelled = hamiconfig.spellings(data, backends)
        try:
            data, notes = hamiconfig.translate(data, backends)
        except ConfigError as exc:  # names the key as the file writes it already
            raise ConfigError(shown_message(f"{path}: {exc}")) from exc
        for note in notes:
            log.warning("%s", shown_message(f"{path}: HAMi device-config {note}"))
    try:
        config = parse_config(data, backends=backends)
    except ConfigError as exc:
        raise ConfigError(
            shown_message(f"{path}: {hamiconfig.as_written(str(exc), spelled)}")
        ) from exc
    return attrs.evolve(config, source=str(path), spelled=spelled)


def with_overrides(config: HamiConfig, **overrides: Any) -> HamiConfig:
    """``config`` with the fields a command's flags override, those given not None
    (``force_overwrite_default_scheduler=False`` from
    ``--no-force-overwrite-default-scheduler``; None: as the file says).

    Raises:
        TypeError: a name that is not a ``HamiConfig`` field.
    """
    changes = {name: value for name, value in overrides.items() if value is not None}
    return attrs.evolve(config, **changes) if changes else config


def parse_config(data: object, *, backends: Mapping[str, BackendInfo]) -> HamiConfig:
    """Validate an already-parsed document (a mapping). See ``load_config``."""
    if not isinstance(data, Mapping):
        raise ConfigError("the configuration must be a mapping")
    version = data.get("version")
    if version != CONFIG_VERSION:
        raise ConfigError(f"version: expected {shown(CONFIG_VERSION)}, got {shown(version)}")
    unknown = [k for k in data if k not in _TOP_KEYS and k not in backends]
    if unknown:
        allowed = ", ".join([*_TOP_KEYS, *sorted(backends)])
        raise ConfigError(f"unknown key {shown(unknown[0])} (allowed: {allowed})")

    scheduler_name = _typed(data, "schedulerName", str, DEFAULT_SCHEDULER_NAME)
    if not is_dns_subdomain(scheduler_name):
        raise ConfigError(
            f"schedulerName: {shown(scheduler_name)} is not a DNS-1123 subdomain (lower-case "
            "letters, digits, '-' and '.', at most 253), as kube-apiserver requires of a "
            "pod's spec.schedulerName"
        )
    policies = data.get("defaultSchedulerPolicy")
    policies = {} if policies is None else policies
    if not isinstance(policies, Mapping):
        raise ConfigError("defaultSchedulerPolicy: must be a mapping")
    for key in policies:
        if key not in ("nodeSchedulerPolicy", "gpuSchedulerPolicy"):
            raise ConfigError(f"defaultSchedulerPolicy.{shown_key(key)}: unknown key")
    node_policy = _enum(policies, "nodeSchedulerPolicy", NodePolicy, NodePolicy.BINPACK)
    device_chain = None
    if "gpuSchedulerPolicy" in policies:
        try:
            device_chain = DevicePolicyChain.parse(str(policies["gpuSchedulerPolicy"]))
        except ValueError as exc:
            raise ConfigError(f"defaultSchedulerPolicy.gpuSchedulerPolicy: {exc}") from None
    device_policy = device_chain.primary if device_chain else DevicePolicy.SPREAD
    expiry = _typed(data, "nodeLockExpirySeconds", float, 300.0)
    if not expiry > 0:
        raise ConfigError(f"nodeLockExpirySeconds: must be > 0, got {expiry}")
    force = _typed(data, "forceOverwriteDefaultScheduler", bool, True)

    vendors = {
        name: _vendor(name, {} if data[name] is None else data[name], info)
        for name, info in backends.items()
        if name in data
    }
    return HamiConfig(
        scheduler_name=scheduler_name,
        node_policy=node_policy,
        device_policy=device_policy,
        device_policy_chain=device_chain,
        node_lock_expiry_s=expiry,
        force_overwrite_default_scheduler=force,
        vendors=vendors,
    )


def _vendor(name: str, section: object, info: BackendInfo) -> VendorConfig:
    if not isinstance(section, Mapping):
        raise ConfigError(f"{name}: must be a mapping")
    fields: dict[str, Any] = {}
    options = dict(info.option_defaults)
    for key in section:
        if key in _VENDOR_KEYS:
            attr, kind = _VENDOR_KEYS[key]
            fields[attr] = _typed(section, key, kind, None, prefix=f"{name}.")
            if key in _RESOURCE_NAME_KEYS and fields[attr]:
                _check_resource_name(fields[attr], f"{name}.{key}")
                if len(info.device_types) > 1:
                    # one name for several device types would merge their requests
                    raise ConfigError(
                        f"{name}.{key}: hami-{name} serves {len(info.device_types)} device "
                        f"types ({', '.join(t.vendor for t in info.device_types)}); a common "
                        "resource name would be all of theirs (rename per type where the "
                        "backend offers it)"
                    )
        elif key in info.option_defaults:
            default = info.option_defaults[key]
            options[key] = _typed(section, key, type(default), default, prefix=f"{name}.")
            if isinstance(default, list):
                _check_items(options[key], default, f"{name}.{key}")
            _check_named_option(key, options[key], f"{name}.{key}")
        else:
            allowed = ", ".join([*_VENDOR_KEYS, *sorted(info.option_defaults)])
            raise ConfigError(f"{name}.{shown_key(key)}: unknown key (allowed: {allowed})")
    cfg = VendorConfig(**fields, options=options)
    checks = (
        ("deviceSplitCount", 1 <= cfg.split_count <= MAX_SPLIT_COUNT, f"1..{MAX_SPLIT_COUNT}"),
        ("deviceMemoryScaling", cfg.memory_scaling > 0, "> 0"),
        ("deviceCoreScaling", cfg.core_scaling > 0, "> 0"),
        ("defaultMemory", 0 <= cfg.default_memory_mib <= INT32_MAX, f"0..{INT32_MAX} MiB"),
        ("defaultCores", 0 <= cfg.default_cores_pct <= 100, "0..100"),
        ("defaultGPUNum", 1 <= cfg.default_count <= INT32_MAX, f"1..{INT32_MAX}"),
    )
    for key, ok, allowed in checks:
        if not ok:
            raise ConfigError(
                f"{name}.{key}: value {shown(section.get(key))} is out of range ({allowed})"
            )
    return cfg


def is_extended_resource_name(name: str) -> bool:
    """Whether ``name`` is one kube-apiserver accepts as an extended resource in a pod's
    limits and a node's capacity (apimachinery ``helper.IsExtendedResourceName``): a
    qualified ``domain/name`` outside the ``kubernetes.io`` domain, not starting with
    ``requests.``, and still a qualified name with ``requests.`` prepended (quota keys)."""
    return (
        "kubernetes.io/" not in name
        and not name.startswith("requests.")
        and _QUALIFIED_NAME.fullmatch(name) is not None
        and _QUALIFIED_NAME.fullmatch("requests." + name) is not None
    )


def _check_resource_name(name: str, where: str) -> None:
    if not is_extended_resource_name(name):
        raise ConfigError(
            f"{where}: {shown(name)} is not a Kubernetes extended resource name "
            "(domain/name outside kubernetes.io, e.g. example.com/gpu)"
        )


# A RuntimeClass name is a DNS-1123 subdomain (apimachinery IsDNS1123Subdomain, checked
# by kube-apiserver on a pod's runtimeClassName): a bad one would fail every pod later.
_DNS1123_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN: Final = re.compile(
    r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)


#: Option-name endings that state a number's range, whatever backend declares the option
#: (a number, or each number of a list): (ending, check, the range in words). Checked
#: after ``...TimeoutSeconds`` (> 0), so ``...Seconds`` is the rest.
_NUMBER_RANGES: Final[tuple[tuple[str, Callable[[float], bool], str], ...]] = (
    # a multiplier of a request (HAMi's int32 ``memoryFactor``, hygon/ascend
    # ``pkg/device``): HAMi applies it only when > 1, so 0 or less would silently be 1
    ("Factor", lambda v: v > 0, "> 0"),
    ("Seconds", lambda v: v >= 0, ">= 0 seconds"),
    ("MiB", lambda v: v >= 0, ">= 0 MiB"),
    ("Pct", lambda v: 0 <= v <= 100, "0..100 percent"),
)


def _check_named_option(key: str, value: Any, where: str) -> None:
    """The rules a backend option's name states, whatever backend declares it:
    ``runtimeClassName`` is "" or a RuntimeClass name, ``resource...Name`` an extended
    resource name (or ""), ``...TimeoutSeconds`` a positive number of seconds, and the
    ranges of ``_NUMBER_RANGES`` (``...Factor`` > 0, ``...Seconds`` / ``...MiB`` >= 0,
    ``...Pct`` 0..100) for a number or each number of a list.

    Raises:
        ConfigError: naming ``where`` (``hygon.memoryFactor``), or ``where[i]`` for the
            item of a list.
    """
    if key.endswith("TimeoutSeconds") and isinstance(value, (int, float)) and not value > 0:
        raise ConfigError(f"{where}: must be > 0 seconds, got {shown(value)}")
    for ending, ok, allowed in _NUMBER_RANGES:
        if not key.endswith(ending):
            continue
        items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for pos, item in items:
            if isinstance(item, (int, float)) and not isinstance(item, bool) and not ok(item):
                at = where if pos is None else f"{where}[{pos}]"
                raise ConfigError(f"{at}: must be {allowed}, got {shown(item)}")
        break
    if key == "runtimeClassName" and value and not is_dns_subdomain(value):
        raise ConfigError(
            f"{where}: {shown(value)} is not a RuntimeClass name (a DNS-1123 subdomain: "
            "lower-case alphanumerics, '-' and '.')"
        )
    if key.startswith("resource") and key.endswith("Name") and isinstance(value, str) and value:
        _check_resource_name(value, where)


def _check_items(items: list[Any], default: list[Any], where: str) -> None:
    # A non-empty default list says its items' type (ignoredXids: ints); an empty one
    # says nothing, and the backend's hami_check_config checks it.
    kinds = {type(item) for item in default}
    if len(kinds) != 1 or (kind := kinds.pop()) not in (int, float, str):
        return
    for pos, item in enumerate(items):
        try:
            _typed({"v": item}, "v", kind, None)
        except ConfigError:
            raise ConfigError(
                f"{where}[{pos}]: expected {kind.__name__}, got {shown(item)}"
            ) from None


def is_dns_label(value: str) -> bool:
    """Whether ``value`` is a DNS-1123 label: what kube-apiserver requires of a namespace's
    name (apimachinery ``IsDNS1123Label``: at most 63 lower-case alphanumerics or '-')."""
    return len(value) <= 63 and _DNS1123_LABEL.fullmatch(value) is not None


#: What kube-apiserver requires of a namespace's name, in words (``IsDNS1123Label``).
NAMESPACE_RULE: Final = (
    "a DNS-1123 label: lower-case a-z, 0-9 and '-', at most 63, alphanumeric at both ends"
)


def namespace_problem(value: str) -> str | None:
    """Why ``value`` cannot be a namespace's name (apimachinery ``ValidateNamespaceName``:
    a DNS-1123 label), or None when it can; the reason reads after the value
    (``'' is not a namespace: ...``)."""
    if is_dns_label(value):
        return None
    return f"is not a namespace: {NAMESPACE_RULE}"


def namespaced_name_problem(value: str, *, any_name: bool = False) -> str | None:
    """Why ``value`` cannot name a namespaced object (``NAMESPACE/NAME``: a DNS-1123 label,
    then a DNS-1123 subdomain, as the name of a ConfigMap or Secret), or None when it
    can. ``any_name``: the name is only looked up (a pod named in a snapshot), so any
    non-empty one will do."""
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        return "is not NAMESPACE/NAME"
    if not is_dns_label(namespace):
        return f"has a namespace that is not {NAMESPACE_RULE}"
    if not any_name and not is_dns_subdomain(name):
        return "has a name that is not a DNS-1123 subdomain (lower-case a-z, 0-9, '-', '.')"
    return None


# A label's key and value (apimachinery validation.IsQualifiedName, IsValidLabelValue):
# the key an optional DNS-1123 subdomain prefix and "/", then a name part; both parts of
# at most 63 characters, alphanumeric at both ends, '-', '_' and '.' inside.
_LABEL_NAME: Final = re.compile(r"(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_NAME_RULE: Final = "at most 63 of A-Z, a-z, 0-9, '-', '_', '.', alphanumeric at both ends"


def label_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a label's key (apimachinery ``IsQualifiedName``: ``[PREFIX/]NAME``,
    PREFIX a DNS-1123 subdomain of at most 253 characters, NAME at most 63 of A-Z, a-z,
    0-9, '-', '_', '.', alphanumeric at both ends), or None when it can."""
    prefix, slash, name = key.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return "is not a label key: its prefix is not a DNS-1123 subdomain (lower-case a-z, 0-9, '-', '.')"
    if not _LABEL_NAME.fullmatch(name):
        return f"is not a label key: its name is not {_LABEL_NAME_RULE}"
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a label's value (apimachinery ``IsValidLabelValue``: empty,
    or at most 63 of A-Z, a-z, 0-9, '-', '_', '.', alphanumeric at both ends), or None
    when it can."""
    if value == "" or _LABEL_NAME.fullmatch(value):
        return None
    return f"is not a label value: empty, or {_LABEL_NAME_RULE}"


def is_dns_subdomain(value: str) -> bool:
    """Whether ``value`` is a DNS-1123 subdomain: what kube-apiserver requires of a
    RuntimeClass name and of a pod's ``spec.schedulerName`` (apimachinery
    ``IsDNS1123Subdomain``, applied by ``ValidatePodSpec``)."""
    return _DNS1123_SUBDOMAIN.fullmatch(value) is not None


def read_config_document(path: str | Path) -> Any:
    """The one YAML document of a configuration file, read with ``documents``' bounds
    (size, nesting, alias expansion, UTF-8, integer length).

    Raises:
        ConfigError: the file cannot be read or parsed; the message names the file.
    """
    try:
        return documents.load_yaml(documents.read_text(path), budget=documents.CONFIG_NODE_BUDGET)
    except InvalidInputError as exc:
        raise ConfigError(shown_message(f"{path}: {exc}")) from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """One line for a YAML syntax error: ``line 5, column 3: expected ',' or ']'``."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem or 'invalid YAML'}"
    return " ".join(str(exc).split())


def _typed(data: Mapping[str, Any], key: str, kind: type, default: Any, *, prefix: str = "") -> Any:
    if key not in data:
        return default
    value: Any = data[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{prefix}{key}: expected {kind.__name__}, got {shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        # YAML's .nan / .inf are floats, but no scaling factor or duration can be one
        raise ConfigError(f"{prefix}{key}: must be a finite number, got {shown(value)}")
    return value


def _enum(data: Mapping[str, Any], key: str, kind: Any, default: Any) -> Any:
    if key not in data:
        return default
    try:
        return kind(data[key])
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise ConfigError(
            f"defaultSchedulerPolicy.{key}: {shown(data[key])} is not one of {allowed}"
        ) from None
