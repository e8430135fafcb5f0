"""The one package a vendor backend imports: the backend kit.

Everything a backend needs from the core is here, so a backend's imports say
``from hami_core.backend import ...`` and nothing else of the core:

- the hook marker ``hookimpl`` (specs: ``hami_core.plugin.hookspecs``), the declaration
  ``reads_pod_annotations`` of the pod annotations a ``hami_parse_request`` reads, and the model
  classes that cross the hooks (``DeviceInfo``, ``DeviceRequest``, ``FitResult``, ...);
- the configuration section ``VendorConfig`` and the errors a hook may raise
  (``InvalidInputError`` for bad input, ``ConfigError`` for a bad section);
- devices shared by count only (``countshared``: HAMi's Biren and Vastai request and
  fit, parameterised by vendor key, resource names and UUID filter keys);
- the shared device fit (``fit_devices``, ``node_score``, ``DeviceFilters``,
  ``FitRules``; module ``hami_core.backend.fit``), which the core also uses to score a
  placement when a backend has no ``hami_score``, and a vendor's fit stated as data
  (``VendorFit``: its filter annotation keys ``FilterKeys``, its rules, its own step);
- helpers every vendor would otherwise write again: ``read_quantity`` (limits, else
  requests; the message names container, resource and value), ``read_stated`` (a
  container's count / memory / percentages as ``StatedRequest``), ``resource_names`` (the
  section's name overrides), ``stated_quantities`` (what a container states, as written),
  ``denies_invalid_input`` (an admission function's ``InvalidInputError`` as a denial),
  ``annotations_of``, ``discovered`` (a container's slices as the node's discovered
  devices), ``IndexedDevices`` (a runtime told devices by node index), ``run_tool`` /
  ``ToolRunner`` / ``ConfiguredTool`` (a management tool with a timeout, behind a
  protocol tests fake; its command and timeout named by section options), ``scaled`` /
  ``inventory_device`` (the one scaling, rounded down), ``registered_devices`` /
  ``decode_inventory`` (a node's register annotation read as the core reads it, for a
  ``hami_node_devices`` that adds a vendor's facts), ``set_resources`` (the admission
  patch of a container's resources), ``live_pod_uids`` (the pods a node-local record
  may still be held for, in ``hami_release``), ``hami_annotation_keys`` (a vendor's four
  annotation keys from HAMi's naming pattern), ``package_version`` (a backend's
  ``__version__``), ``remove_tree`` (a tenant-written host tree removed with bounded
  descriptors and work, never following links).

``docs/writing-a-backend.md`` walks a new vendor through it.
"""

from hami_core import model
from hami_core.errors import (
    AnnotationError,
    ConfigError,
    HamiError,
    InvalidInputError,
    QuantityError,
)
from hami_core.model import *  # noqa: F403 (every model class crosses the hooks)
from hami_core.plugin import hookimpl, reads_pod_annotations
from hami_core.protocol.config import VendorConfig, is_extended_resource_name
from hami_core.protocol.migallocations import (
    MigAllocation,
    decode_mig_allocations,
    encode_mig_allocations,
    mig_allocations_of,
)
from hami_core.protocol.patches import pointer_token, set_resources
from hami_core.protocol.pods import live_pod_uids
from hami_core.protocol.quantity import INT32_MAX, parse_quantity_int

from . import countshared, fit
from .admission import denies_invalid_input
from .allocation import IndexedDevices, discovered
from .fit import (
    GENERIC,
    DeviceFilters,
    fit_devices,
    largest_accepted,
    load,
    node_score,
    rank_groups,
    same_device_rules,
    type_matches,
)
from .hostfs import remove_tree
from .inventory import (
    MAX_NODE_ANNOTATION_BYTES,
    WHOLE_CORES_PCT,
    capacity_quantities,
    decode_inventory,
    inventory_device,
    numbered_devices,
    registered_devices,
    scaled,
)
from .names import (
    UNKNOWN_VERSION,
    AnnotationKeys,
    hami_annotation_keys,
    package_version,
    type_filter_keys,
    uuid_filter_keys,
)
from .requests import (
    StatedRequest,
    annotations_of,
    first_annotation,
    read_quantity,
    read_stated,
    resource_names,
    resource_value,
    stated_quantities,
)
from .tools import (
    DEFAULT_TOOL_TIMEOUT_S,
    ConfiguredTool,
    SubprocessRunner,
    ToolRunner,
    configured_tool_output,
    run_tool,
)
from .vendorfit import FilterKeys, FitCall, VendorFit

__all__ = [
    *model.__all__,
    "DEFAULT_TOOL_TIMEOUT_S",
    "GENERIC",
    "INT32_MAX",
    "MAX_NODE_ANNOTATION_BYTES",
    "UNKNOWN_VERSION",
    "WHOLE_CORES_PCT",
    "AnnotationKeys",
    "AnnotationError",
    "ConfigError",
    "ConfiguredTool",
    "DeviceFilters",
    "FilterKeys",
    "IndexedDevices",
    "FitCall",
    "HamiError",
    "InvalidInputError",
    "MigAllocation",
    "QuantityError",
    "StatedRequest",
    "SubprocessRunner",
    "ToolRunner",
    "VendorConfig",
    "VendorFit",
    "annotations_of",
    "capacity_quantities",
    "configured_tool_output",
    "first_annotation",
    "countshared",
    "decode_inventory",
    "decode_mig_allocations",
    "denies_invalid_input",
    "discovered",
    "encode_mig_allocations",
    "mig_allocations_of",
    "fit",
    "fit_devices",
    "largest_accepted",
    "hami_annotation_keys",
    "hookimpl",
    "reads_pod_annotations",
    "remove_tree",
    "is_extended_resource_name",
    "inventory_device",
    "live_pod_uids",
    "load",
    "same_device_rules",
    "node_score",
    "numbered_devices",
    "package_version",
    "parse_quantity_int",
    "pointer_token",
    "rank_groups",
    "read_quantity",
    "registered_devices",
    "read_stated",
    "resource_names",
    "resource_value",
    "run_tool",
    "scaled",
    "set_resources",
    "stated_quantities",
    "type_filter_keys",
    "type_matches",
    "uuid_filter_keys",
]
