"""Kubernetes label selectors (``metav1.LabelSelector``) over a pod's or namespace's
labels: the one reading shared by PodDisruptionBudgets (``cluster/eviction.py``), the
consolidation planner and the what-if's pod affinity and topology spread
(``simulate/podtopology.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Labels = Mapping[str, str]


class SelectorError(ValueError):
    """A label selector kube-scheduler cannot read (``LabelSelectorAsSelector`` fails)."""


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def selector_matches(selector: Any, labels: Labels) -> bool:
    """``metav1.LabelSelectorAsSelector(selector).Matches(labels)``: None matches
    nothing, ``{}`` everything; ``matchLabels`` and every ``matchExpressions`` entry
    must hold (operators ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``).

    Raises:
        SelectorError: not a mapping, an unknown operator, or values where the operator
            takes none (or none where it needs some), as kube's conversion refuses them.
    """
    if selector is None:
        return False
    if not isinstance(selector, Mapping):
        raise SelectorError(f"a label selector must be a mapping, got {type(selector).__name__}")
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError("matchLabels must be a mapping")
    ok = all(labels.get(str(k)) == str(v) for k, v in match_labels.items())
    for expr in _as_list(selector.get("matchExpressions")) or ():
        if not isinstance(expr, Mapping):
            raise SelectorError("a matchExpressions entry must be a mapping")
        ok = _expression(expr, labels) and ok  # evaluated in full: a bad one must raise
    return ok


def _expression(expr: Mapping[str, Any], labels: Labels) -> bool:
    key, op = str(expr.get("key", "")), expr.get("operator")
    values = [str(v) for v in _as_list(expr.get("values"))]
    if op in ("In", "NotIn"):
        if not values:
            raise SelectorError(f"for 'in', 'notin' operators, values set can't be empty ({key})")
        return (labels.get(key) in values) if op == "In" else (labels.get(key) not in values)
    if op in ("Exists", "DoesNotExist"):
        if values:
            raise SelectorError(f"values set must be empty for exists and does not exist ({key})")
        return (key in labels) if op == "Exists" else (key not in labels)
    raise SelectorError(f"{str(op)[:40]!r} is not a valid label selector operator")


__all__ = ["Labels", "SelectorError", "selector_matches"]
