"""kube-scheduler's filters that look at other pods: ``InterPodAffinity`` (required pod
affinity and anti-affinity, the incoming pod's and the existing pods') and
``PodTopologySpread`` (``whenUnsatisfiable: DoNotSchedule``), for the what-if.

Semantics follow kube-scheduler's plugins (``pkg/scheduler/framework/plugins/``):

- ``interpodaffinity/filtering.go``: a term's namespaces are its ``namespaces`` plus
  those its ``namespaceSelector`` matches (an empty selector: every namespace), the
  pod's own when both are unset (``GetNamespacesFromPodAffinityTerm``); a nil
  ``labelSelector`` matches no pod (``metav1.LabelSelectorAsSelector``). A node is
  refused, checked in this order as 1.20 does, when (1) it lacks a topology key of the
  pod's required affinity, or its domain holds no pod matching all the terms — unless
  no pod anywhere matches and the pod matches its own terms, the first of a series
  (``satisfyPodAffinity``), (2) its domain holds a pod matching a required
  anti-affinity term of the pod (``satisfyPodAntiAffinity``), (3) an existing pod's
  required anti-affinity term matches the incoming pod and the node shares that
  term's topology domain with the existing pod (``satisfyExistingPodsAntiAffinity``).
  Each refusal carries kube-scheduler's two reasons.
- ``podtopologyspread/filtering.go``: only nodes passing the pod's ``nodeSelector``
  and required node affinity (``nodeAffinityPolicy: Honor``, the default), tolerated
  taints when ``nodeTaintsPolicy: Honor`` (default ``Ignore``), and carrying every
  constraint's topology key count; matching pods are counted per domain in the pod's
  namespace, terminating pods left out; a node is refused when
  ``count(domain) + selfMatch - min(count over domains) > maxSkew``, the minimum being
  0 when fewer than ``minDomains`` domains exist; ``matchLabelKeys`` adds the pod's own
  values to the selector.

Incoming pods' affinity ``matchLabelKeys`` / ``mismatchLabelKeys`` are merged into the
selector as kube-apiserver does on create (``pkg/registry/core/pod/strategy.go``); the
snapshot's pods were merged by their API server already.

What only scores nodes (preferred terms, ``ScheduleAnyway``) and what needs objects a
snapshot lacks (volumes) is not modelled; ``not_modelled`` says so per pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from hami_core.cluster.selectors import SelectorError, selector_matches

from .kubechecks import matches_affinity, untolerated_taint

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
#: InterPodAffinity's reasons (kube-scheduler ``interpodaffinity/filtering.go``).
AFFINITY_NOT_MATCH = "node(s) didn't match pod affinity/anti-affinity"
AFFINITY_RULES = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
#: PodTopologySpread's reasons (``podtopologyspread/filtering.go``).
SPREAD_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
SPREAD_MISSING_LABEL = (
    "node(s) didn't match pod topology spread constraints (missing required label)"
)
#: The label kube-apiserver (1.21+) puts on every namespace, its name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

Labels = Mapping[str, str]


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    raw = meta.get("labels") if isinstance(meta, Mapping) else None
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


@attrs.frozen(kw_only=True)
class _Term:
    """A processed ``PodAffinityTerm`` (kube-scheduler's ``AffinityTerm``)."""

    namespaces: frozenset[str]
    namespace_selector: Any  # None: no namespace through a selector
    selector: Any
    topology_key: str

    def matches(self, pod: Mapping[str, Any], ns_labels: Callable[[str], Labels]) -> bool:
        """``PodMatchesTermsNamespaceAndSelector``."""
        ns = _namespace(pod)
        if ns not in self.namespaces and not selector_matches(
            self.namespace_selector, ns_labels(ns)
        ):
            return False
        return selector_matches(self.selector, _labels(pod))


def _namespace(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("namespace") or "default")


def _terms(pod: Mapping[str, Any], kind: str, *, incoming: bool = False) -> list[_Term]:
    """The pod's required ``kind`` (``podAffinity`` / ``podAntiAffinity``) terms."""
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    section = affinity.get(kind) if isinstance(affinity, Mapping) else None
    raw = section.get(REQUIRED) if isinstance(section, Mapping) else None
    out = []
    for term in _as_list(raw):
        if not isinstance(term, Mapping):
            raise SelectorError(f"a {kind} term must be a mapping")
        namespaces = frozenset(str(n) for n in _as_list(term.get("namespaces")))
        ns_selector = term.get("namespaceSelector")
        if not namespaces and ns_selector is None:
            namespaces = frozenset({_namespace(pod)})
        selector = term.get("labelSelector")
        if incoming:
            selector = _with_label_keys(selector, term, _labels(pod))
            selector_matches(selector, {})  # unreadable: kube-scheduler's PreFilter fails
            selector_matches(ns_selector, {})
        out.append(
            _Term(
                namespaces=namespaces,
                namespace_selector=ns_selector,
                selector=selector,
                topology_key=str(term.get("topologyKey") or ""),
            )
        )
    return out


def _with_label_keys(selector: Any, term: Mapping[str, Any], labels: Labels) -> Any:
    """kube-apiserver's merge of ``matchLabelKeys`` (``In``) and ``mismatchLabelKeys``
    (``NotIn``) with the pod's own label values; a nil selector stays nil."""
    if not isinstance(selector, Mapping):
        return selector
    extra = [
        {"key": k, "operator": op, "values": [labels[k]]}
        for field, op in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn"))
        for k in map(str, _as_list(term.get(field)))
        if k in labels
    ]
    if not extra:
        return selector
    return {**selector, "matchExpressions": [*_as_list(selector.get("matchExpressions")), *extra]}


@attrs.frozen(kw_only=True)
class _Constraint:
    max_skew: int
    topology_key: str
    selector: Any
    min_domains: int
    honor_affinity: bool
    honor_taints: bool


def _constraints(pod: Mapping[str, Any]) -> list[_Constraint]:
    """The pod's ``DoNotSchedule`` topology spread constraints."""
    out = []
    labels = _labels(pod)
    for c in _as_list((pod.get("spec") or {}).get("topologySpreadConstraints")):
        if not isinstance(c, Mapping):
            raise SelectorError("a topologySpreadConstraints entry must be a mapping")
        if c.get("whenUnsatisfiable") != "DoNotSchedule":
            continue
        selector = c.get("labelSelector")
        keys = [k for k in map(str, _as_list(c.get("matchLabelKeys"))) if k in labels]
        if isinstance(selector, Mapping) and keys:
            extra = [{"key": k, "operator": "In", "values": [labels[k]]} for k in keys]
            selector = {
                **selector,
                "matchExpressions": [*_as_list(selector.get("matchExpressions")), *extra],
            }
        selector_matches(selector, {})  # unreadable: kube-scheduler's PreFilter fails
        out.append(
            _Constraint(
                max_skew=_int(c.get("maxSkew"), 1),
                topology_key=str(c.get("topologyKey") or ""),
                selector=selector,
                min_domains=_int(c.get("minDomains"), 1),
                honor_affinity=c.get("nodeAffinityPolicy", "Honor") != "Ignore",
                honor_taints=c.get("nodeTaintsPolicy") == "Honor",
            )
        )
    return out


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@attrs.frozen(kw_only=True)
class PodTopologyCheck:
    """What ``prepare`` computed for one incoming pod (kube-scheduler's PreFilter
    state); ``reason(node)`` is its Filter.

    Attributes:
        error: why the pod's or an existing pod's terms cannot be read ("" when they
            can): every node is refused with it, as kube-scheduler's PreFilter error
            leaves the pod unscheduled.
    """

    error: str = ""
    pod: Mapping[str, Any] = attrs.field(factory=dict)
    affinity: tuple[_Term, ...] = ()
    anti_affinity: tuple[_Term, ...] = ()
    affinity_counts: Mapping[tuple[str, str], int] = attrs.field(factory=dict)
    anti_affinity_counts: Mapping[tuple[str, str], int] = attrs.field(factory=dict)
    existing_anti_counts: Mapping[tuple[str, str], int] = attrs.field(factory=dict)
    constraints: tuple[_Constraint, ...] = ()
    spread_counts: Mapping[tuple[str, str], int] = attrs.field(factory=dict)
    spread_min: Mapping[str, int] = attrs.field(factory=dict)
    ns_labels: Callable[[str], Labels] = lambda ns: {NAMESPACE_NAME_LABEL: ns}

    def reason(self, node: Mapping[str, Any]) -> str:
        """Why kube-scheduler's PodTopologySpread or InterPodAffinity refuses ``node``,
        or "" (reasons joined by ", ", as kube-scheduler lists a status's reasons)."""
        if self.error:
            return self.error
        labels = _labels(node)
        spread = self._spread(labels)
        if spread:
            return spread
        # kube-scheduler 1.20's order (held against it by tests/e2e/
        # test_pod_topology_real.py): the pod's affinity, its anti-affinity, then the
        # existing pods' anti-affinity
        if self.affinity and not self._affinity_fits(labels):
            return f"{AFFINITY_NOT_MATCH}, {AFFINITY_RULES}"
        for t in self.anti_affinity:
            value = labels.get(t.topology_key)
            if value is not None and self.anti_affinity_counts.get((t.topology_key, value), 0):
                return f"{AFFINITY_NOT_MATCH}, {ANTI_AFFINITY_RULES}"
        if any(self.existing_anti_counts.get(pair, 0) > 0 for pair in labels.items()):
            return f"{AFFINITY_NOT_MATCH}, {EXISTING_ANTI_AFFINITY}"
        return ""

    def _affinity_fits(self, labels: Labels) -> bool:
        exists = True
        for t in self.affinity:
            value = labels.get(t.topology_key)
            if value is None:
                return False  # every topology key must be on the node
            if self.affinity_counts.get((t.topology_key, value), 0) <= 0:
                exists = False
        if exists:
            return True
        # the first pod of a series with affinity to itself
        return not self.affinity_counts and all(
            t.matches(self.pod, self.ns_labels) for t in self.affinity
        )

    def _spread(self, labels: Labels) -> str:
        if not self.constraints:
            return ""
        if any(c.topology_key not in labels for c in self.constraints):
            return SPREAD_MISSING_LABEL
        pod_labels = _labels(self.pod)
        for c in self.constraints:
            if c.topology_key not in self.spread_min:
                continue  # no eligible domain at all (kube-scheduler skips it too)
            self_match = 1 if selector_matches(c.selector, pod_labels) else 0
            count = self.spread_counts.get((c.topology_key, labels[c.topology_key]), 0)
            if count + self_match - self.spread_min[c.topology_key] > c.max_skew:
                return SPREAD_NOT_MATCH
        return ""


def prepare(
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    pods_on: Callable[[str], Iterable[Mapping[str, Any]]],
    *,
    ns_labels: Callable[[str], Labels],
) -> PodTopologyCheck:
    """kube-scheduler's PreFilter of PodTopologySpread and InterPodAffinity for ``pod``.

    Args:
        pod: the incoming pod (after admission).
        nodes: every Node object.
        pods_on: node name -> the pods bound to it (``spec.nodeName``); finished pods
            and the incoming pod itself are left out here.
        ns_labels: namespace name -> its labels (for ``namespaceSelector``).

    Returns:
        The check; never raises for a bad term: the reason says it.
    """
    uid = (pod.get("metadata") or {}).get("uid")
    try:
        affinity = _terms(pod, "podAffinity", incoming=True)
        anti = _terms(pod, "podAntiAffinity", incoming=True)
        constraints = _constraints(pod)
        # Without terms or constraints of its own, only pods with anti-affinity matter
        # (kube-scheduler's HavePodsWithAffinityList, for the same reason: speed).
        every = bool(affinity or anti or constraints)
        placed = [
            (node, _labels(node), other)
            for node in nodes
            for other in pods_on(str((node.get("metadata") or {}).get("name", "")))
            if (other.get("metadata") or {}).get("uid") != uid
            and (every or _has_anti_affinity(other))
        ]
        existing_anti: dict[tuple[str, str], int] = {}
        affinity_counts: dict[tuple[str, str], int] = {}
        anti_counts: dict[tuple[str, str], int] = {}
        for _, node_labels, other in placed:
            try:
                for t in _terms(other, "podAntiAffinity"):
                    _count(existing_anti, t, node_labels, t.matches(pod, ns_labels))
            except SelectorError:
                pass  # no API server stores it; a hand-edited snapshot must not block all
            if affinity and all(t.matches(other, ns_labels) for t in affinity):
                for t in affinity:
                    _count(affinity_counts, t, node_labels, True)
            for t in anti:
                _count(anti_counts, t, node_labels, t.matches(other, ns_labels))
        spread_counts, spread_min = _spread_state(pod, constraints, nodes, placed)
    except SelectorError as exc:
        return PodTopologyCheck(error=f"invalid label selector: {exc}")
    return PodTopologyCheck(
        pod=pod,
        affinity=tuple(affinity),
        anti_affinity=tuple(anti),
        affinity_counts=affinity_counts,
        anti_affinity_counts=anti_counts,
        existing_anti_counts=existing_anti,
        constraints=tuple(constraints),
        spread_counts=spread_counts,
        spread_min=spread_min,
        ns_labels=ns_labels,
    )


def _has_anti_affinity(pod: Mapping[str, Any]) -> bool:
    affinity = (pod.get("spec") or {}).get("affinity")
    return isinstance(affinity, Mapping) and bool(affinity.get("podAntiAffinity"))


def _count(counts: dict[tuple[str, str], int], t: _Term, labels: Labels, hit: bool) -> None:
    if hit and t.topology_key in labels:
        pair = (t.topology_key, labels[t.topology_key])
        counts[pair] = counts.get(pair, 0) + 1


def _spread_state(
    pod: Mapping[str, Any],
    constraints: Sequence[_Constraint],
    nodes: Sequence[Mapping[str, Any]],
    placed: Sequence[tuple[Mapping[str, Any], Labels, Mapping[str, Any]]],
) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
    """Matching pods per topology domain over the eligible nodes, and each key's
    minimum (0 below ``minDomains``)."""
    if not constraints:
        return {}, {}
    ns = _namespace(pod)
    counts: dict[tuple[str, str], int] = {}
    names: set[str] = set()
    for node in nodes:
        labels = _labels(node)
        if any(c.topology_key not in labels for c in constraints):
            continue
        if any(c.honor_affinity for c in constraints) and not matches_affinity(pod, node):
            continue
        if any(c.honor_taints for c in constraints) and untolerated_taint(pod, node):
            continue
        names.add(str((node.get("metadata") or {}).get("name", "")))
        for c in constraints:
            counts.setdefault((c.topology_key, labels[c.topology_key]), 0)
    for node, node_labels, other in placed:
        if str((node.get("metadata") or {}).get("name", "")) not in names:
            continue
        meta = other.get("metadata") or {}
        if meta.get("deletionTimestamp") or _namespace(other) != ns:
            continue
        other_labels = _labels(other)
        for c in constraints:
            if selector_matches(c.selector, other_labels):
                pair = (c.topology_key, node_labels[c.topology_key])
                counts[pair] += 1
    minimum: dict[str, int] = {}
    for c in constraints:
        domains = [n for (k, _), n in counts.items() if k == c.topology_key]
        if domains:
            minimum[c.topology_key] = 0 if len(domains) < c.min_domains else min(domains)
    return counts, minimum


def not_modelled(pod: Mapping[str, Any], *, described_namespaces: Iterable[str] = ()) -> list[str]:
    """One line per thing of ``pod`` that kube-scheduler weighs and the what-if does
    not: preferred (anti-)affinity and ``ScheduleAnyway`` spread (kube-scheduler's
    scores; the extender's score alone picks the node here), volumes through claims
    (``VolumeBinding``, ``VolumeZone``, ``NodeVolumeLimits`` need PVs and storage
    classes), resource claims (dynamic resource allocation), scheduling gates, and a
    ``namespaceSelector`` read without the namespaces' own labels (only
    ``kubernetes.io/metadata.name`` is known for a namespace ``described_namespaces``
    does not list)."""
    spec = pod.get("spec") or {}
    if not isinstance(spec, Mapping):
        return []
    out = []
    affinity = spec.get("affinity") or {}
    affinity = affinity if isinstance(affinity, Mapping) else {}
    for kind, what in (
        ("nodeAffinity", "preferred node affinity"),
        ("podAffinity", "preferred pod affinity"),
        ("podAntiAffinity", "preferred pod anti-affinity"),
    ):
        section = affinity.get(kind)
        if isinstance(section, Mapping) and section.get(PREFERRED):
            out.append(f"{what} not modelled (it only scores nodes in kube-scheduler)")
    if any(
        isinstance(c, Mapping) and c.get("whenUnsatisfiable") == "ScheduleAnyway"
        for c in _as_list(spec.get("topologySpreadConstraints"))
    ):
        out.append(
            "topology spread with whenUnsatisfiable: ScheduleAnyway not modelled "
            "(it only scores nodes in kube-scheduler)"
        )
    for v in _as_list(spec.get("volumes")):
        if not isinstance(v, Mapping):
            continue
        claim = v.get("persistentVolumeClaim")
        if isinstance(claim, Mapping):
            out.append(
                f"PersistentVolumeClaim {str(claim.get('claimName', ''))[:253]}: volume "
                "binding and zones not modelled"
            )
        elif isinstance(v.get("ephemeral"), Mapping):
            out.append(
                f"ephemeral volume {str(v.get('name', ''))[:253]}: volume binding and "
                "zones not modelled"
            )
    if _as_list(spec.get("resourceClaims")):
        out.append("resource claims (dynamic resource allocation) not modelled")
    if _as_list(spec.get("schedulingGates")):
        out.append(
            "schedulingGates not modelled (kube-scheduler holds the pod until they are removed)"
        )
    known = set(described_namespaces)
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind)
        terms = section.get(REQUIRED) if isinstance(section, Mapping) else None
        for term in _as_list(terms):
            sel = term.get("namespaceSelector") if isinstance(term, Mapping) else None
            if isinstance(sel, Mapping) and _needs_namespace_labels(sel) and not known:
                out.append(
                    f"{kind} namespaceSelector read with only each namespace's "
                    f"{NAMESPACE_NAME_LABEL} label: the cluster file holds no Namespace "
                    "objects (add namespaces to the kubectl get)"
                )
                break
    return out


def _needs_namespace_labels(selector: Mapping[str, Any]) -> bool:
    keys = set(
        map(
            str,
            (selector.get("matchLabels") or {})
            if isinstance(selector.get("matchLabels"), Mapping)
            else (),
        )
    )
    keys |= {
        str(e.get("key"))
        for e in _as_list(selector.get("matchExpressions"))
        if isinstance(e, Mapping)
    }
    return bool(keys - {NAMESPACE_NAME_LABEL})


__all__ = [
    "AFFINITY_NOT_MATCH",
    "AFFINITY_RULES",
    "ANTI_AFFINITY_RULES",
    "EXISTING_ANTI_AFFINITY",
    "SPREAD_MISSING_LABEL",
    "SPREAD_NOT_MATCH",
    "PodTopologyCheck",
    "SelectorError",
    "not_modelled",
    "prepare",
    "selector_matches",
]
