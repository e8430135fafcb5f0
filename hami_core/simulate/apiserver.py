"""kube-apiserver's per-object checks, for what the what-if creates and reads.

A real API server refuses one object and the others go on: the simulation does the
same. Two stages, in the API server's order:

1. **Decoding** (``decode_problem``): an object whose fields have the wrong JSON type
   (a ``labels`` value that is a number, ``containers`` that is not a list, a quantity
   that does not parse) cannot be handled as its kind at all. The API server answers
   ``Pod in version "v1" cannot be handled as a Pod: <decoder detail>``; the detail
   here names the field in this project's words (the Go decoder's own text names Go
   types and byte offsets).
2. **Validation** (``validate_pod``, ``validate_template``), after the mutating
   webhooks: Kubernetes ``pkg/apis/core/validation/validation.go`` (``ValidatePod``,
   ``ValidatePodTemplateSpec``), with its field paths and texts, joined as the API
   server joins them (``Pod "p" is invalid: <field>: <type>: <detail>``; several as
   ``[a, b]``, ``apimachinery/pkg/util/errors.aggregate``). Checked: ``metadata``
   (name and namespace format, label keys and values, annotation keys and total size),
   containers (present, names unique RFC 1123 labels), ``resources`` (names, non-negative
   quantities, whole numbers for extended resources, requests within limits, and for
   resources that cannot be overcommitted — extended resources, hugepages — a limit
   that the request equals: "Limit must be set for non overcommitable resources",
   "must be equal to nvidia.com/gpu limit"), ``nodeSelector``, tolerations' operators,
   node and pod (anti-)affinity (selector operators and values, ``topologyKey``), and
   ``topologySpreadConstraints`` (``maxSkew``, ``topologyKey``, ``whenUnsatisfiable``,
   no duplicate pair). Defaulting comes first (``SetDefaults_Pod``: a limit without a
   request is also the request).

The texts are kube-apiserver 1.20's, held word for word against the real server by
``tests/e2e/test_apiserver_messages.py``, quirks included: a fractional extended
resource prints Go's ``resource.Quantity{...}`` struct; a pod affinity term's selector
errors sit under ``...[i].matchExpressions.matchExpressions[j]``; a topology spread
constraint's ``labelSelector`` is not validated (kube-scheduler then cannot read it);
the defaulted request of a limit is refused with it. Where Go lists several errors of
one map in random order, they are sorted here.

Not checked: fields that never change a placement (``image``, probes, volumes' own
shape, env); a manifest without ``image`` still runs here, as the bundled examples do.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Final

from hami_core.errors import QuantityError
from hami_core.protocol.quantity import parse_quantity_exact

#: The kinds the API server names in its messages (``GroupKind.String()``).
QUALIFIED_KINDS: Mapping[str, str] = {
    "Pod": "Pod",
    "Deployment": "Deployment.apps",
    "StatefulSet": "StatefulSet.apps",
    "ReplicaSet": "ReplicaSet.apps",
    "Job": "Job.batch",
}
#: ``apimachinery/pkg/util/validation`` texts.
DNS1123_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
QUALIFIED_NAME_MSG: Final = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NO_LIMIT_MSG: Final = "Limit must be set for non overcommitable resources"
#: ``TotalAnnotationSizeLimitB``.
ANNOTATIONS_MAX_BYTES: Final = 256 * 1024

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1123_SUBDOMAIN = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"
)
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_STANDARD_CONTAINER = frozenset({"cpu", "memory", "ephemeral-storage"})
#: A message quotes at most this much of a value a tenant wrote.
_SHOWN = 80
#: A refusal lists at most this many errors.
MAX_ERRORS_SHOWN: Final = 20


# -- formatting, as apimachinery's field.Error does ------------------------------------


def _show(value: Any) -> str:
    """Go's ``%q`` for strings (cut), ``%v`` for numbers."""
    if isinstance(value, str):
        cut = value if len(value) <= _SHOWN else value[:_SHOWN] + "..."
        quoted = json.dumps(cut, ensure_ascii=False)
        # as strconv.Quote: what does not print (controls, bidi marks) is escaped
        return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in quoted)
    return str(value)[:_SHOWN]


def _invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {_show(value)}: {detail}"


def _required(path: str, detail: str = "") -> str:
    return f"{path}: Required value" + (f": {detail}" if detail else "")


def _forbidden(path: str, detail: str) -> str:
    return f"{path}: Forbidden: {detail}"


def _duplicate(path: str, value: Any) -> str:
    return f"{path}: Duplicate value: {_show(value)}"


def _not_supported(path: str, value: Any, valid: Iterable[str]) -> str:
    options = ", ".join(json.dumps(v) for v in valid)
    return f"{path}: Unsupported value: {_show(value)}: supported values: {options}"


def aggregate(errors: Iterable[str]) -> str:
    """``errors.NewAggregate(list).Error()``: one message as it is, several as
    ``[a, b]`` with repeats dropped; past ``MAX_ERRORS_SHOWN`` the rest are counted
    (``and N more errors``), so a tenant's thousand bad labels stay one short line."""
    seen = list(dict.fromkeys(errors))
    if len(seen) == 1:
        return seen[0]
    shown = seen[:MAX_ERRORS_SHOWN]
    if len(seen) > MAX_ERRORS_SHOWN:
        shown.append(f"and {len(seen) - MAX_ERRORS_SHOWN} more errors")
    return "[" + ", ".join(shown) + "]"


def invalid_message(kind: str, name: str, errors: Iterable[str]) -> str:
    """The API server's answer to an invalid object (``apierrors.NewInvalid``):
    ``Pod "p" is invalid: ...``, the kind qualified by its group (``Deployment.apps``)."""
    return f"{QUALIFIED_KINDS.get(kind, kind)} {_show(name)} is invalid: {aggregate(errors)}"


def undecodable_message(kind: str, detail: str) -> str:
    """The API server's answer to an object it cannot decode as ``kind``."""
    return f'{kind} in version "v1" cannot be handled as a {kind}: {detail}'


# -- names -----------------------------------------------------------------------------


def dns1123_label(value: str) -> list[str]:
    """``IsDNS1123Label``."""
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _DNS1123_LABEL.match(value):
        out.append(DNS1123_LABEL_MSG)
    return out


def dns1123_subdomain(value: str) -> list[str]:
    """``IsDNS1123Subdomain``."""
    out = []
    if len(value) > 253:
        out.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        out.append(DNS1123_SUBDOMAIN_MSG)
    return out


def qualified_name(value: str) -> list[str]:
    """``IsQualifiedName``: ``[prefix/]name``, the prefix a DNS subdomain; an empty name
    part gets both the emptiness and the pattern message, as kube's does."""
    parts = value.split("/")
    out = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            out.append("prefix part must be non-empty")
        else:
            out += [f"prefix part {m}" for m in dns1123_subdomain(prefix)]
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',"
            "  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?"
            "[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. "
            "'example.com/MyName')"
        ]
    if not name:
        out.append("name part must be non-empty")
    elif len(name) > 63:
        out.append("name part must be no more than 63 characters")
    if not _QUALIFIED_NAME.match(name):
        out.append(QUALIFIED_NAME_MSG)
    return out


def label_value(value: str) -> list[str]:
    """``IsValidLabelValue``."""
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if value and not _QUALIFIED_NAME.match(value):
        out.append(LABEL_VALUE_MSG)
    return out


def _labels(labels: Any, path: str) -> list[str]:
    """``ValidateLabels``: both a bad key and a bad value are reported at ``path``."""
    out = []
    for k, v in (labels or {}).items():
        out += [_invalid(path, k, m) for m in qualified_name(str(k))]
        out += [_invalid(path, v, m) for m in label_value(str(v))]
    return out


def _annotations(annotations: Any, path: str) -> list[str]:
    """``ValidateAnnotations``: keys (lower-cased) are qualified names; 256 KiB in all."""
    out = []
    total = 0
    for k, v in (annotations or {}).items():
        out += [_invalid(path, k, m) for m in qualified_name(str(k).lower())]
        total += len(str(k).encode()) + len(str(v).encode())
    if total > ANNOTATIONS_MAX_BYTES:
        out.append(f"{path}: Too long: must have at most {ANNOTATIONS_MAX_BYTES} bytes")
    return out


def _object_meta(meta: Mapping[str, Any], *, named: bool) -> list[str]:
    """``ValidateObjectMeta`` (name a DNS subdomain, namespace a DNS label)."""
    out = []
    if named:
        name = str(meta.get("name") or "")
        if not name:
            out.append(_required("metadata.name", "name or generateName is required"))
        else:
            out += [_invalid("metadata.name", name, m) for m in dns1123_subdomain(name)]
        ns = str(meta.get("namespace") or "default")
        out += [_invalid("metadata.namespace", ns, m) for m in dns1123_label(ns)]
    out += _labels(meta.get("labels"), "metadata.labels")
    out += _annotations(meta.get("annotations"), "metadata.annotations")
    return out


# -- resources -------------------------------------------------------------------------


def _is_native(name: str) -> bool:
    """``IsNativeResource``: no domain, or a ``kubernetes.io`` one."""
    return "/" not in name or "kubernetes.io/" in name


def _is_hugepages(name: str) -> bool:
    return name.startswith("hugepages-")


def is_extended(name: str) -> bool:
    """``IsExtendedResourceName``: not native, not ``requests.``-prefixed, and
    ``requests.<name>`` a qualified name (``nvidia.com/gpu``, ``amd.com/gpu``)."""
    return (
        not _is_native(name)
        and not name.startswith("requests.")
        and not qualified_name("requests." + name)
    )


def overcommit_allowed(name: str) -> bool:
    """``IsOvercommitAllowed``: native resources except hugepages; never an extended
    resource (its request must equal its limit)."""
    return _is_native(name) and not _is_hugepages(name)


def _resource_name(name: str, path: str) -> list[str]:
    """``validateContainerResourceName`` (after ``validateResourceName``)."""
    msgs = qualified_name(name)
    if msgs:
        return [_invalid(path, name, m) for m in msgs]
    if "/" not in name:
        out = []
        if name not in _STANDARD and not _is_hugepages(name):
            out.append(_invalid(path, name, "must be a standard resource type or fully qualified"))
        if name not in _STANDARD_CONTAINER and not _is_hugepages(name):
            out.append(_invalid(path, name, "must be a standard resource for containers"))
        return out
    if not _is_native(name) and not is_extended(name):
        return [_invalid(path, name, "doesn't follow extended resource name standard")]
    return []


def _go_quantity(raw: Any) -> str:
    """How kube-apiserver 1.20 prints a ``resource.Quantity`` value in a field error
    (``%#v`` of the struct: ``resource.Quantity{i:resource.int64Amount{value:500,
    scale:-3}, ...}``), for the quantities ``ParseQuantity`` keeps as an int64 amount;
    others (beyond int64, fractional binary suffixes, whose struct names a pointer) as
    the text written."""
    text = str(raw).strip()
    m = _QUANTITY.match(text)
    if not m:
        return _show(text)
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    num = whole.lstrip("0") or "0"
    if suffix in _DECIMAL_SUFFIX:
        fmt, exponent = "DecimalSI", _DECIMAL_SUFFIX[suffix]
    elif suffix and suffix[0] in "eE":
        fmt, exponent = "DecimalExponent", int(suffix[1:])
    else:
        return _show(text)  # binary suffixes with a fraction: an inf.Dec pointer
    if 18 - (len(num) + len(frac)) < 0:
        return _show(text)
    scale = exponent - len(frac)
    shifted = num + frac
    value = int(shifted)
    if scale < -9 or value >= 2**63:
        return _show(text)
    canonical = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
    if sign == "-":
        value = -value
    cached = json.dumps(text) if canonical else '""'
    return (
        f"resource.Quantity{{i:resource.int64Amount{{value:{value}, scale:{scale}}}, "
        f"d:resource.infDecAmount{{Dec:(*inf.Dec)(nil)}}, s:{cached}, Format:{json.dumps(fmt)}}}"
    )


_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)\Z")
_DECIMAL_SUFFIX = {
    "": 0,
    "n": -9,
    "u": -6,
    "m": -3,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
#: ``IsStandardResourceName`` (``standardResources``), hugepages aside.
_STANDARD = frozenset(
    {
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "quotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "persistentvolumeclaims",
        "configmaps",
        "services.nodeports",
        "services.loadbalancers",
        "requests.storage",
    }
)


def _amount(value: Any) -> Decimal | None:
    """The quantity's exact value, negative ones included (the API server decodes them;
    validation refuses them), or None when it is not a quantity."""
    sign = Decimal(1)
    if isinstance(value, str) and value.startswith("-"):
        sign, value = Decimal(-1), value[1:]
    elif isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        sign, value = Decimal(-1), -value
    try:
        return sign * parse_quantity_exact(value, resource="quantity")
    except QuantityError:
        return None


def _resources(resources: Mapping[str, Any], path: str) -> list[str]:
    """``ValidateResourceRequirements``."""
    out = []
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    # Go ranges over a map in random order; several errors are listed sorted here
    for section, values in (("limits", limits), ("requests", requests)):
        for rname, raw in sorted(values.items(), key=lambda kv: str(kv[0])):
            name, fpath = str(rname), f"{path}.{section}[{rname}]"
            out += _resource_name(name, fpath)
            amount = _amount(raw)
            if amount is None:
                continue  # refused at decoding already (decode_problem)
            if amount < 0:
                out.append(_invalid(fpath, str(raw), "must be greater than or equal to 0"))
            if is_extended(name) and amount != amount.to_integral_value():
                out.append(f"{fpath}: Invalid value: {_go_quantity(raw)}: must be an integer")
    for rname, raw in sorted(requests.items(), key=lambda kv: str(kv[0])):
        name = str(rname)
        request = _amount(raw)
        if name in limits:
            limit = _amount(limits[name])
            if request is None or limit is None:
                continue
            if request != limit and not overcommit_allowed(name):
                out.append(_invalid(f"{path}.requests", str(raw), f"must be equal to {name} limit"))
            elif request > limit:
                out.append(
                    _invalid(
                        f"{path}.requests", str(raw), f"must be less than or equal to {name} limit"
                    )
                )
        elif not overcommit_allowed(name):
            out.append(_required(f"{path}.limits", NO_LIMIT_MSG))
    return out


# -- the pod spec ----------------------------------------------------------------------


def _containers(spec: Mapping[str, Any], path: str) -> list[str]:
    """``validateContainers`` then ``validateInitContainers`` (1.20's order: an init
    container named as an app container is the duplicate)."""
    out = []
    if not spec.get("containers"):
        out.append(_required(f"{path}.containers"))
    names: set[str] = set()
    for key in ("containers", "initContainers"):
        for i, c in enumerate(spec.get(key) or []):
            cpath = f"{path}.{key}[{i}]"
            name = str(c.get("name") or "")
            if not name:
                out.append(_required(f"{cpath}.name"))
            else:
                out += [_invalid(f"{cpath}.name", name, m) for m in dns1123_label(name)]
                if name in names:
                    out.append(_duplicate(f"{cpath}.name", name))
                names.add(name)
            out += _resources(c.get("resources") or {}, f"{cpath}.resources")
    return out


def _selector(selector: Any, path: str) -> list[str]:
    """``ValidateLabelSelector``."""
    if selector is None:
        return []
    out = _labels(selector.get("matchLabels"), f"{path}.matchLabels")
    for i, e in enumerate(selector.get("matchExpressions") or []):
        epath = f"{path}.matchExpressions[{i}]"
        op, values = e.get("operator"), e.get("values") or []
        if op in ("In", "NotIn"):
            if not values:
                out.append(
                    _required(
                        f"{epath}.values", "must be specified when `operator` is 'In' or 'NotIn'"
                    )
                )
        elif op in ("Exists", "DoesNotExist"):
            if values:
                out.append(
                    _forbidden(
                        f"{epath}.values",
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            out.append(_invalid(f"{epath}.operator", str(op), "not a valid selector operator"))
        out += [
            _invalid(f"{epath}.key", str(e.get("key", "")), m)
            for m in qualified_name(str(e.get("key", "")))
        ]
    return out


def _node_requirement(e: Mapping[str, Any], path: str) -> list[str]:
    """``ValidateNodeSelectorRequirement``."""
    op, values = e.get("operator"), e.get("values") or []
    out = []
    if op in ("In", "NotIn"):
        if not values:
            out.append(
                _required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'")
            )
    elif op in ("Exists", "DoesNotExist"):
        if values:
            out.append(
                _forbidden(
                    f"{path}.values",
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
            )
    elif op in ("Gt", "Lt"):
        if len(values) != 1:
            out.append(
                _required(
                    f"{path}.values",
                    "must be specified single value when `operator` is 'Lt' or 'Gt'",
                )
            )
    else:
        out.append(_invalid(f"{path}.operator", str(op), "not a valid selector operator"))
    key = str(e.get("key", ""))
    return out + [_invalid(f"{path}.key", key, m) for m in qualified_name(key)]


def _node_field_requirement(e: Mapping[str, Any], path: str) -> list[str]:
    """``ValidateNodeFieldSelectorRequirement`` (``metadata.name`` only)."""
    op, values = e.get("operator"), e.get("values") or []
    out = []
    if op in ("In", "NotIn"):
        if len(values) != 1:
            out.append(
                _required(
                    f"{path}.values",
                    "must be only one value when `operator` is 'In' or 'NotIn' for node "
                    "field selector",
                )
            )
    else:
        out.append(_invalid(f"{path}.operator", str(op), "not a valid selector operator"))
    key = str(e.get("key", ""))
    if key != "metadata.name":
        out.append(_invalid(f"{path}.key", key, "not a valid field selector key"))
    else:
        for i, v in enumerate(values):
            out += [_invalid(f"{path}.values[{i}]", str(v), m) for m in dns1123_subdomain(str(v))]
    return out


def _node_selector_term(term: Mapping[str, Any], path: str) -> list[str]:
    """``ValidateNodeSelectorTerm``."""
    out = []
    for j, e in enumerate(term.get("matchExpressions") or []):
        out += _node_requirement(e, f"{path}.matchExpressions[{j}]")
    for j, e in enumerate(term.get("matchFields") or []):
        out += _node_field_requirement(e, f"{path}.matchFields[{j}]")
    return out


def _weight(term: Mapping[str, Any], path: str) -> list[str]:
    weight = term.get("weight", 0)
    if not 1 <= weight <= 100:
        return [_invalid(f"{path}.weight", weight, "must be in the range 1-100")]
    return []


def _node_affinity(node: Mapping[str, Any], path: str) -> list[str]:
    """``validateNodeAffinity``: the required selector, then the preferred terms."""
    out = []
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        tpath = f"{path}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        terms = required.get("nodeSelectorTerms") or []
        if not terms:
            out.append(_required(tpath, "must have at least one node selector term"))
        for i, term in enumerate(terms):
            out += _node_selector_term(term, f"{tpath}[{i}]")
    ppath = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    for i, term in enumerate(node.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        out += _weight(term, f"{ppath}[{i}]")
        out += _node_selector_term(term.get("preference") or {}, f"{ppath}[{i}].preference")
    return out


def _pod_affinity_term(term: Mapping[str, Any], tpath: str) -> list[str]:
    """``validatePodAffinityTerm``."""
    # 1.20's path for the term's selector (it passes fldPath.Child("matchExpressions")
    # to ValidateLabelSelector)
    out = _selector(term.get("labelSelector"), f"{tpath}.matchExpressions")
    out += _selector(term.get("namespaceSelector"), f"{tpath}.namespaceSelector")
    key = str(term.get("topologyKey") or "")
    if not key:
        out.append(_required(f"{tpath}.topologyKey", "can not be empty"))
    return out + [_invalid(f"{tpath}.topologyKey", key, m) for m in qualified_name(key)]


def _pod_affinity_terms(section: Mapping[str, Any], path: str) -> list[str]:
    """``validatePodAffinity``: the required terms, then the weighted ones."""
    out = []
    rpath = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    for i, term in enumerate(section.get("requiredDuringSchedulingIgnoredDuringExecution") or []):
        out += _pod_affinity_term(term, f"{rpath}[{i}]")
    ppath = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    for i, term in enumerate(section.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        out += _weight(term, f"{ppath}[{i}]")
        out += _pod_affinity_term(
            term.get("podAffinityTerm") or {}, f"{ppath}[{i}].podAffinityTerm"
        )
    return out


def _affinity(affinity: Mapping[str, Any], path: str) -> list[str]:
    out = []
    if isinstance(affinity.get("nodeAffinity"), Mapping):
        out += _node_affinity(affinity["nodeAffinity"], f"{path}.nodeAffinity")
    for kind in ("podAffinity", "podAntiAffinity"):
        if isinstance(affinity.get(kind), Mapping):
            out += _pod_affinity_terms(affinity[kind], f"{path}.{kind}")
    return out


_WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")


def _spread(constraints: list[Any], path: str) -> list[str]:
    """``validateTopologySpreadConstraints``."""
    out = []
    pairs: set[tuple[str, str]] = set()
    for i, c in enumerate(constraints):
        cpath = f"{path}[{i}]"
        skew = c.get("maxSkew")
        if not isinstance(skew, int) or isinstance(skew, bool) or skew <= 0:
            out.append(_invalid(f"{cpath}.maxSkew", skew, "must be greater than zero"))
        key = str(c.get("topologyKey") or "")
        if not key:
            out.append(_required(f"{cpath}.topologyKey", "can not be empty"))
        when = c.get("whenUnsatisfiable")
        if when not in _WHEN_UNSATISFIABLE:
            out.append(_not_supported(f"{cpath}.whenUnsatisfiable", str(when), _WHEN_UNSATISFIABLE))
        pair = (key, str(when))
        if pair in pairs:
            out.append(
                _duplicate(f"{cpath}.{{topologyKey, whenUnsatisfiable}}", f"{{{key}, {when}}}")
            )
        pairs.add(pair)
        # 1.20 does not validate the constraint's labelSelector: kube-scheduler then
        # fails to read it (podtopology.SelectorError)
    return out


def _tolerations(tolerations: list[Any], path: str) -> list[str]:
    """``validateTolerations``: the operator (an empty key needs ``Exists``)."""
    out = []
    for i, t in enumerate(tolerations):
        tpath = f"{path}[{i}].operator"
        op = t.get("operator") or "Equal"
        if not t.get("key") and op != "Exists":
            out.append(
                _invalid(
                    tpath,
                    str(t.get("operator") or ""),
                    'operator must be Exists when `key` is empty, which means "match all '
                    'values and all keys"',
                )
            )
        if op not in ("Equal", "Exists"):
            out.append(_not_supported(tpath, str(op), ("Equal", "Exists")))
    return out


def _spec(spec: Mapping[str, Any], path: str) -> list[str]:
    """``ValidatePodSpec``, the parts listed in the module docstring."""
    out = _containers(spec, path)
    out += _labels(spec.get("nodeSelector"), f"{path}.nodeSelector")
    out += _tolerations(spec.get("tolerations") or [], f"{path}.tolerations")
    if isinstance(spec.get("affinity"), Mapping):
        out += _affinity(spec["affinity"], f"{path}.affinity")
    out += _spread(spec.get("topologySpreadConstraints") or [], f"{path}.topologySpreadConstraints")
    return out


def validate_pod(pod: Mapping[str, Any]) -> list[str]:
    """``ValidatePodCreate``'s errors for a decodable pod (``decode_problem`` is None),
    one ``<field>: <type>: <detail>`` line each, [] when valid; after the API server's
    defaulting (``SetDefaults_Pod``: a limit without a request is also the request)."""
    spec = default_requests(pod.get("spec") or {})
    return _object_meta(pod.get("metadata") or {}, named=True) + _spec(spec, "spec")


def default_requests(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``spec`` whose containers' (and init containers') requests hold every
    limit that has no request (kube-apiserver's ``SetDefaults_Pod``)."""
    out = dict(spec)
    for key in ("initContainers", "containers"):
        items = []
        for c in spec.get(key) or []:
            res = c.get("resources") or {}
            limits = res.get("limits") or {}
            if limits:
                requests = {**limits, **(res.get("requests") or {})}
                c = {**c, "resources": {**res, "requests": requests}}
            items.append(c)
        if key in spec:
            out[key] = items
    return out


def validate_template(obj: Mapping[str, Any]) -> list[str]:
    """A workload's own errors (``Deployment``, ``Job``, ...): its metadata and its
    pod template (``spec.template``), as its ``ValidateXSpec`` checks them, for a
    decodable object (``decode_problem(obj, kind=...)`` is None)."""
    own = _object_meta(obj.get("metadata") or {}, named=True)
    template = (obj.get("spec") or {}).get("template") or {}
    tmeta = [
        "spec.template." + e for e in _object_meta(template.get("metadata") or {}, named=False)
    ]
    return own + tmeta + _spec(template.get("spec") or {}, "spec.template.spec")


# -- decoding --------------------------------------------------------------------------


def _string_map(value: Any, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"{path} must be a mapping"
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            return f"{path} values must be strings: {_show(str(k))}"
    return None


def _list_of_maps(value: Any, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, list):
        return f"{path} must be a list"
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            return f"{path}[{i}] must be a mapping"
    return None


def _map(value: Any, path: str) -> str | None:
    return None if value is None or isinstance(value, Mapping) else f"{path} must be a mapping"


def _quantities(value: Any, path: str) -> str | None:
    problem = _map(value, path)
    if problem or value is None:
        return problem
    for name, raw in value.items():
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            return f"{path}[{name}] must be a quantity"
        if _amount(raw) is None:
            return (
                f"{path}[{name}]: quantities must match the regular expression "
                "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            )
    return None


def without_nulls(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` with every ``null`` field of every mapping dropped, at any
    depth: JSON null is an unset field, as the API server decodes it (``labels: null``
    is no labels). Nulls inside lists stay (``containers: [null]`` cannot be decoded)."""

    def strip(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: strip(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(obj)  # type: ignore[no-any-return]


def _or_empty(value: Any) -> Any:
    """None read as an empty mapping (JSON null is unset); anything else as it is."""
    return {} if value is None else value


def _meta_problem(meta: Any, path: str) -> str | None:
    if not isinstance(meta, Mapping):
        return f"{path} must be a mapping"
    for key in ("name", "namespace"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            return f"{path}.{key} must be a string"
    return _string_map(meta.get("labels"), f"{path}.labels") or _string_map(
        meta.get("annotations"), f"{path}.annotations"
    )


def _first(*problems: str | None) -> str | None:
    return next((p for p in problems if p), None)


def _selector_problem(selector: Any, path: str) -> str | None:
    if selector is None:
        return None
    if not isinstance(selector, Mapping):
        return f"{path} must be a mapping"
    problem = _string_map(selector.get("matchLabels"), f"{path}.matchLabels") or _list_of_maps(
        selector.get("matchExpressions"), f"{path}.matchExpressions"
    )
    if problem:
        return problem
    for i, e in enumerate(selector.get("matchExpressions") or []):
        for key in ("key", "operator"):
            if e.get(key) is not None and not isinstance(e[key], str):
                return f"{path}.matchExpressions[{i}].{key} must be a string"
        values = e.get("values")
        if values is not None and (
            not isinstance(values, list) or not all(isinstance(v, str) for v in values)
        ):
            return f"{path}.matchExpressions[{i}].values must be a list of strings"
    return None


def _spec_problem(spec: Any, path: str) -> str | None:
    if not isinstance(spec, Mapping):
        return f"{path} must be a mapping"
    for key in ("initContainers", "containers"):
        problem = _list_of_maps(spec.get(key), f"{path}.{key}")
        if problem:
            return problem
        for i, c in enumerate(spec.get(key) or []):
            cpath = f"{path}.{key}[{i}]"
            res = c.get("resources")
            problem = _first(
                None
                if c.get("name") is None or isinstance(c["name"], str)
                else f"{cpath}.name must be a string",
                _map(res, f"{cpath}.resources"),
                _list_of_maps(c.get("ports"), f"{cpath}.ports"),
            )
            if problem:
                return problem
            for part in ("limits", "requests"):
                problem = _quantities((res or {}).get(part), f"{cpath}.resources.{part}")
                if problem:
                    return problem
    problem = _first(
        _string_map(spec.get("nodeSelector"), f"{path}.nodeSelector"),
        _list_of_maps(spec.get("tolerations"), f"{path}.tolerations"),
        _list_of_maps(spec.get("topologySpreadConstraints"), f"{path}.topologySpreadConstraints"),
        _map(spec.get("affinity"), f"{path}.affinity"),
        _list_of_maps(spec.get("volumes"), f"{path}.volumes"),
        None
        if spec.get("schedulerName") is None or isinstance(spec["schedulerName"], str)
        else f"{path}.schedulerName must be a string",
        None
        if spec.get("nodeName") is None or isinstance(spec["nodeName"], str)
        else f"{path}.nodeName must be a string",
    )
    if problem:
        return problem
    for i, c in enumerate(spec.get("topologySpreadConstraints") or []):
        problem = _selector_problem(
            c.get("labelSelector"), f"{path}.topologySpreadConstraints[{i}].labelSelector"
        )
        if problem:
            return problem
    return _affinity_problem(spec.get("affinity") or {}, f"{path}.affinity")


def _affinity_problem(affinity: Mapping[str, Any], path: str) -> str | None:
    for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
        section = affinity.get(kind)
        if section is None:
            continue
        spath = f"{path}.{kind}"
        if not isinstance(section, Mapping):
            return f"{spath} must be a mapping"
        required = section.get("requiredDuringSchedulingIgnoredDuringExecution")
        rpath = f"{spath}.requiredDuringSchedulingIgnoredDuringExecution"
        problem = _list_of_maps(
            section.get("preferredDuringSchedulingIgnoredDuringExecution"),
            f"{spath}.preferredDuringSchedulingIgnoredDuringExecution",
        )
        if problem:
            return problem
        inner = "preference" if kind == "nodeAffinity" else "podAffinityTerm"
        for i, term in enumerate(
            section.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        ):
            tpath = f"{spath}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            weight = term.get("weight")
            if weight is not None and (not isinstance(weight, int) or isinstance(weight, bool)):
                return f"{tpath}.weight must be an integer"
            problem = _map(term.get(inner), f"{tpath}.{inner}") or (
                _node_term_problem(term.get(inner) or {}, f"{tpath}.{inner}")
                if kind == "nodeAffinity"
                else _term_problem(term.get(inner) or {}, f"{tpath}.{inner}")
            )
            if problem:
                return problem
        if kind == "nodeAffinity":
            if required is None:
                continue
            if not isinstance(required, Mapping):
                return f"{rpath} must be a mapping"
            problem = _list_of_maps(required.get("nodeSelectorTerms"), f"{rpath}.nodeSelectorTerms")
            if problem:
                return problem
            for i, term in enumerate(required.get("nodeSelectorTerms") or []):
                problem = _node_term_problem(term, f"{rpath}.nodeSelectorTerms[{i}]")
                if problem:
                    return problem
            continue
        problem = _list_of_maps(required, rpath)
        if problem:
            return problem
        for i, term in enumerate(required or []):
            problem = _term_problem(term, f"{rpath}[{i}]")
            if problem:
                return problem
    return None


def _term_problem(term: Mapping[str, Any], tpath: str) -> str | None:
    """A ``PodAffinityTerm`` whose fields have the wrong types."""
    namespaces = term.get("namespaces")
    return _first(
        _selector_problem(term.get("labelSelector"), f"{tpath}.labelSelector"),
        _selector_problem(term.get("namespaceSelector"), f"{tpath}.namespaceSelector"),
        None
        if namespaces is None
        or (isinstance(namespaces, list) and all(isinstance(n, str) for n in namespaces))
        else f"{tpath}.namespaces must be a list of strings",
        None
        if term.get("topologyKey") is None or isinstance(term["topologyKey"], str)
        else f"{tpath}.topologyKey must be a string",
    )


def _node_term_problem(term: Mapping[str, Any], tpath: str) -> str | None:
    """A ``NodeSelectorTerm`` whose fields have the wrong types."""
    for part in ("matchExpressions", "matchFields"):
        problem = _list_of_maps(term.get(part), f"{tpath}.{part}")
        if problem:
            return problem
        for j, e in enumerate(term.get(part) or []):
            values = e.get("values")
            if values is not None and (
                not isinstance(values, list) or not all(isinstance(v, str) for v in values)
            ):
                return f"{tpath}.{part}[{j}].values must be a list of strings"
            for key in ("key", "operator"):
                if e.get(key) is not None and not isinstance(e[key], str):
                    return f"{tpath}.{part}[{j}].{key} must be a string"
    return None


def decode_problem(obj: Mapping[str, Any], *, kind: str = "Pod") -> str | None:
    """Why the API server could not decode ``obj`` as ``kind`` (a field of the wrong
    JSON type, a quantity that does not parse), or None. ``kind``: ``Pod``, or a
    workload whose ``spec.template`` holds a pod template."""
    problem = _meta_problem(_or_empty(obj.get("metadata")), "metadata")
    if problem:
        return problem
    if kind == "Pod":
        return _spec_problem(obj.get("spec"), "spec")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return "spec must be a mapping"
    template = spec.get("template")
    if not isinstance(template, Mapping):
        return "spec.template must be a mapping"
    return _meta_problem(
        _or_empty(template.get("metadata")), "spec.template.metadata"
    ) or _spec_problem(template.get("spec"), "spec.template.spec")


def node_problem(node: Mapping[str, Any]) -> str | None:
    """Why a snapshot's Node could not have been served (a field of the wrong type:
    labels, annotations, taints, ``spec.unschedulable``, allocatable quantities), or None."""
    problem = _meta_problem(_or_empty(node.get("metadata")), "metadata")
    if problem:
        return problem
    spec, status = node.get("spec"), node.get("status")
    problem = _first(_map(spec, "spec"), _map(status, "status"))
    if problem:
        return problem
    spec, status = spec or {}, status or {}
    problem = _list_of_maps(spec.get("taints"), "spec.taints")
    if problem:
        return problem
    for i, t in enumerate(spec.get("taints") or []):
        for key in ("key", "value", "effect"):
            if t.get(key) is not None and not isinstance(t[key], str):
                return f"spec.taints[{i}].{key} must be a string"
    if spec.get("unschedulable") is not None and not isinstance(spec["unschedulable"], bool):
        return "spec.unschedulable must be true or false"
    return _quantities(status.get("capacity"), "status.capacity") or _quantities(
        status.get("allocatable"), "status.allocatable"
    )


def quota_problem(quota: Mapping[str, Any]) -> str | None:
    """Why a ResourceQuota could not have been served (``spec.hard`` not quantities)."""
    problem = _meta_problem(_or_empty(quota.get("metadata")), "metadata") or _map(
        quota.get("spec"), "spec"
    )
    if problem:
        return problem
    return _quantities((quota.get("spec") or {}).get("hard"), "spec.hard")


__all__ = [
    "NO_LIMIT_MSG",
    "QUALIFIED_KINDS",
    "aggregate",
    "decode_problem",
    "default_requests",
    "invalid_message",
    "is_extended",
    "node_problem",
    "overcommit_allowed",
    "quota_problem",
    "undecodable_message",
    "validate_pod",
    "validate_template",
    "without_nulls",
]
