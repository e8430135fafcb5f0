"""What consolidation has done, kept where only the administrator writes (docs/consolidation.md).

One ConfigMap (``data["ledger.json"]``) in the scheduler's namespace holds:

- ``evictions``: the time (Unix seconds) of every eviction consolidation made in the
  last hour, for ``--max-evictions-per-hour``;
- ``plans``: per pending pod being helped (by uid), the node it was nominated to and
  the moves done for it (the evicted pod, its uid, its controller's uid, the node its
  replacement was planned for, when, and the replacement once nominated), the pods
  its plan still has to move, and, when a PodDisruptionBudget stopped its plan, why
  and when.

``hami defrag --apply`` and every scheduler leader read and write the same record, so a
new leader resumes a plan in progress (it nominates the replacements still unseen and
counts the evictions made) instead of starting again; an eviction is never repeated:
the pod evicted is gone or terminating, and the planner counts a terminating pod's room
as free.

Why not an annotation on the pending pod: its author may write its annotations, and
could then erase the hour's count or name another namespace's pods as replacements to
nominate. A tenant cannot write a ConfigMap of the scheduler's namespace.

Writes are optimistic (``resourceVersion``): a ledger changed since it was read raises
``ConflictError``, and the caller reads it again. A ledger that cannot be read as ours
raises ``LedgerError``: consolidation then stops (the hour's count is unknown), it never
starts afresh.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from hami_core.errors import HamiError, NotFoundError

#: The key of the ConfigMap's ``data`` that holds the record.
DATA_KEY = "ledger.json"
#: Where the record is unless told (``hami scheduler --consolidation-ledger``, ``hami
#: defrag --ledger``): the chart's ledger (``<namespace>/<scheduler>-defrag-ledger``) as
#: the documented install makes it (release ``hami`` in namespace ``hami-system``), so
#: ``hami defrag --apply`` counts the same hour as that scheduler without a flag
#: (``tests/chart/test_consolidation_chart.py`` renders the chart and compares).
DEFAULT_LOCATION = "hami-system/hami-scheduler-defrag-ledger"
#: Evictions older than this are forgotten (the per-hour budget's window).
WINDOW_S = 3600.0
#: How long a moved pod's replacement is looked for once its pending pod is bound.
REPLACEMENT_KEEP_S = 300.0
#: How long after its last eviction a plan a PodDisruptionBudget stopped part-way keeps
#: the room it freed (the budget may relax: a replica becoming ready) before giving it
#: back; a budget that never relaxes, or one the pending pod's own tenant pins at 0,
#: then holds no other pod off that room for good (``apply.Applier``).
BLOCKED_HOLD_S = 600.0


class LedgerError(HamiError):
    """The ledger exists but is not a record this code wrote (the message says where)."""


@attrs.define(kw_only=True)
class StepRecord:
    """One eviction made for a pending pod.

    Attributes:
        pod: ``namespace/name`` of the evicted pod.
        uid: its uid (a new pod of the same name is not it).
        owner_uid: the uid of its controller (its replacement's controller).
        to_node: where the plan put its replacement.
        at: when it was evicted (Unix seconds).
        replacement: the uid of its replacement once seen ("" before).
        nominated: whether the replacement was nominated to ``to_node`` (not where a
            helped pod is nominated: ``apply``).
    """

    pod: str
    uid: str
    owner_uid: str
    to_node: str
    at: float
    replacement: str = ""
    nominated: bool = False


@attrs.define(kw_only=True)
class PlanRecord:
    """The moves made for one pending pod (``pod``, uid the ``plans`` key).

    Attributes:
        pod: ``namespace/name`` of the pending pod.
        node: the node it is nominated to (its room held there); "" when a plan that
            moved nothing was stopped (its nomination withdrawn).
        steps: the evictions made for it, in order.
        blocked: why its plan stopped ("" while it goes on): a PodDisruptionBudget
            refused an eviction for the whole wait (``apply.BLOCKED``); cleared when a
            later round tries again.
        blocked_at: when it stopped (Unix seconds; 0 when not). A stopped plan whose
            last eviction is ``BLOCKED_HOLD_S`` old gives its room back (``node`` and
            ``to_move`` emptied).
        to_move: the uids of the pods its plan still has to evict (the latest round's
            plan; an evicted pod leaves it): the scheduler's filter holds the pending
            pod's room as if they were gone (``scheduling.held``), so a plan stopped
            part-way keeps the room it freed.
    """

    pod: str
    node: str
    steps: list[StepRecord] = attrs.field(factory=list)
    blocked: str = ""
    blocked_at: float = 0.0
    to_move: list[str] = attrs.field(factory=list)


@attrs.define(kw_only=True)
class LedgerState:
    """The ledger as read (module docstring); ``version`` is the ConfigMap's
    ``resourceVersion`` ("" when it does not exist yet)."""

    evictions: list[float] = attrs.field(factory=list)
    plans: dict[str, PlanRecord] = attrs.field(factory=dict)
    version: str = ""

    def recent(self, now: float) -> int:
        """Evictions within the last ``WINDOW_S`` before ``now``."""
        return sum(1 for t in self.evictions if now - t < WINDOW_S)

    def prune(self, now: float, live_uids: set[str]) -> None:
        """Forget evictions older than the window, and plans whose pending pod is no
        longer pending (bound, gone: ``live_uids`` holds the pending pods' uids) unless a
        replacement of theirs is still to be nominated (for ``REPLACEMENT_KEEP_S``)."""
        self.evictions = [t for t in self.evictions if now - t < WINDOW_S]
        self.plans = {
            u: p
            for u, p in self.plans.items()
            if u in live_uids
            or any(not s.replacement and now - s.at < REPLACEMENT_KEEP_S for s in p.steps)
        }

    def to_json(self) -> str:
        return json.dumps(
            {
                "evictions": self.evictions,
                "plans": {u: attrs.asdict(p) for u, p in sorted(self.plans.items())},
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str, *, where: str, version: str = "") -> LedgerState:
        """Read a record written by ``to_json``.

        Raises:
            LedgerError: not such a record (``where`` names it).
        """
        try:
            raw = json.loads(text)
            evictions = [float(t) for t in raw.get("evictions") or ()]
            plans = {}
            for uid, p in (raw.get("plans") or {}).items():
                steps = [StepRecord(**s) for s in p.get("steps") or ()]
                plans[str(uid)] = PlanRecord(
                    pod=str(p["pod"]),
                    node=str(p["node"]),
                    steps=steps,
                    blocked=str(p.get("blocked") or ""),
                    blocked_at=float(p.get("blocked_at") or 0),
                    to_move=[str(u) for u in p.get("to_move") or ()],
                )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise LedgerError(f"{where}: not a consolidation ledger ({exc})") from None
        return cls(evictions=evictions, plans=plans, version=version)


class Ledger(Protocol):
    """Where the record lives (module docstring)."""

    def load(self) -> LedgerState:
        """The record now (empty when there is none). Raises ``LedgerError``."""
        ...

    def save(self, state: LedgerState) -> None:
        """Write ``state`` if the record is still at ``state.version`` (then
        ``state.version`` is the new one). Raises ``ConflictError`` otherwise."""
        ...


class MemoryLedger:
    """``Ledger`` in memory (tests, ``hami simulate``): shared by the appliers given it,
    as two scheduler leaders share the ConfigMap."""

    def __init__(self) -> None:
        self.text = ""
        self._version = 0

    def load(self) -> LedgerState:
        if not self.text:
            return LedgerState()
        return LedgerState.from_json(self.text, where="memory ledger", version=str(self._version))

    def save(self, state: LedgerState) -> None:
        from hami_core.errors import ConflictError

        current = str(self._version) if self.text else ""
        if state.version != current:
            raise ConflictError("the ledger changed since it was read")
        self.text = state.to_json()
        self._version += 1
        state.version = str(self._version)


class ConfigMapLedger:
    """``Ledger`` in ConfigMap ``namespace/name`` (RBAC: ``get``, ``create``, ``update`` on
    that ConfigMap)."""

    def __init__(self, api_client: Any, namespace: str, name: str) -> None:
        from kubernetes import client as k8s

        self.core = k8s.CoreV1Api(api_client)
        self.namespace, self.name = namespace, name

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    def load(self) -> LedgerState:
        from hami_core.cluster.kube import call

        try:
            obj = call(
                f"read {self.where}",
                self.core.read_namespaced_config_map,
                self.name,
                self.namespace,
            )
        except NotFoundError:
            return LedgerState()
        data: Mapping[str, Any] = obj.get("data") or {}
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if DATA_KEY not in data:
            raise LedgerError(f"{self.where}: no {DATA_KEY} key")
        return LedgerState.from_json(str(data[DATA_KEY]), where=self.where, version=version)

    def save(self, state: LedgerState) -> None:
        from hami_core.cluster.kube import call

        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "data": {DATA_KEY: state.to_json()},
        }
        if state.version:
            body["metadata"]["resourceVersion"] = state.version
            obj = call(
                f"update {self.where}",
                self.core.replace_namespaced_config_map,
                self.name,
                self.namespace,
                body,
            )
        else:
            obj = call(
                f"create {self.where}", self.core.create_namespaced_config_map, self.namespace, body
            )
        state.version = str((obj.get("metadata") or {}).get("resourceVersion") or "")


class RememberingLedger:
    """A ``Ledger`` that remembers, from the last record it read or wrote, which pods each
    plan in progress still moves (``leaving``): what the scheduler's filter asks between
    consolidation's rounds (``scheduling.held``), without a request of its own."""

    def __init__(self, inner: Ledger) -> None:
        self.inner = inner
        self._leaving: dict[str, frozenset[str]] = {}

    def load(self) -> LedgerState:
        state = self.inner.load()
        self._remember(state)
        return state

    def save(self, state: LedgerState) -> None:
        self.inner.save(state)
        self._remember(state)

    def leaving(self, pod: Mapping[str, Any]) -> frozenset[str]:
        """The uids of the pods the plan in progress for pending ``pod`` still moves
        (empty when none: no plan, or one that holds no node)."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        return self._leaving.get(uid, frozenset())

    def _remember(self, state: LedgerState) -> None:
        self._leaving = {  # one assignment: readers on other threads see old or new
            uid: frozenset(p.to_move) for uid, p in state.plans.items() if p.node and p.to_move
        }


def parse_location(value: str, *, flag: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` of a ledger setting.

    Raises:
        InvalidInputError: not of that form, or a namespace or name the API server
            refuses (``flag`` named).
    """
    from hami_core.errors import InvalidInputError
    from hami_core.protocol.config import namespaced_name_problem

    problem = namespaced_name_problem(value)
    if problem:
        raise InvalidInputError(f"{flag}: {value!r} {problem}")
    namespace, _, name = value.partition("/")
    return namespace, name


__all__ = [
    "DATA_KEY",
    "DEFAULT_LOCATION",
    "WINDOW_S",
    "ConfigMapLedger",
    "Ledger",
    "LedgerError",
    "LedgerState",
    "MemoryLedger",
    "PlanRecord",
    "RememberingLedger",
    "StepRecord",
    "parse_location",
]
