"""Gang groups: the pods of one group are placed all or nothing (docs/preemption-and-gangs.md).

kube-scheduler calls the extender once per pod; its coscheduling plugin (Permit) is not
there for slices it ignores. So when a member of a group is filtered and the group is not
placed yet, ``Gangs`` places ``minMember`` pending members together against current
usage, each through the one filter engine (the member being filtered on the nodes
kube-scheduler passed, the others on the same nodes: a group's members share their
template), holding each member's slices on its node (``ClusterState.hold``) as it goes.
When every one fits, the holds stay as the group's reservation: each member's filter then
answers its reserved node only, other pods' fits and quotas count the held slices, and
the other members are woken (a pod update moves an unschedulable pod back to
kube-scheduler's active queue). When one does not fit, every hold made is let go and each
member's filter answers ``GroupDoesNotFit`` with the shortfall. A member's bind goes
through only with a reservation on that node (made there when the leader has none: a
leader failover re-places the pending members; the bound ones count as placed).
Reservations expire after the group's timeout and are let go.

Which group a pod is in: scheduler-plugins' ``scheduling.x-k8s.io/pod-group`` label, else
Volcano's ``scheduling.k8s.io/group-name`` annotation, within the pod's namespace only.
The minimum: ``hami.io/gang-min-member`` (the largest any pending member states), bounded
by ``max_members``. Everything here is written by the pod's author, so untrusted: a pod
groups only with its own namespace's pods, its held slices count against its
namespace's quota, and a reservation never outlives the timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from hami_core.cluster.base import ClusterStore
from hami_core.cluster.podgroups import PodGroupSpec
from hami_core.errors import ConflictError, InvalidInputError
from hami_core.facts.groups import group_name
from hami_core.facts.holdings import HoldingsReader
from hami_core.facts.podrequest import read_pod_request
from hami_core.model import Allocation, ReasonCode
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import encode_pod_devices
from hami_core.protocol.migallocations import encode_mig_allocations, mig_allocations_of
from hami_core.protocol.pods import is_live, pod_ref

from .filtering import FilterResult
from .state import ClusterState, Hold

log = logging.getLogger(__name__)

#: The default and the largest ``minMember`` a group may ask.
MAX_MEMBERS = 256
#: A refused group not refused again for this long has no member waiting, seconds.
WAITING_FORGET_S = 120.0
#: How long a group's reservation holds its members' slices, seconds.
GANG_TIMEOUT_S = 60.0
#: The longest a member's bind waits for a fellow member's node lock on the same node
#: (HAMi#1832), seconds: well under the extender's ``httpTimeout`` (30 s in the chart).
GANG_LOCK_WAIT_S = 15.0


@attrs.frozen(kw_only=True)
class GangOptions:
    """The gang stage's settings.

    Attributes:
        timeout_s: how long a group's reservation holds its members' slices, seconds.
        max_members: the largest ``hami.io/gang-min-member`` a group may state.
        wake: called with ``(namespace, name)`` of the members to wake once their group
            is placed (None: a thread writes ``hami.io/gang-placed`` on each).
        pod_groups: ``(namespace, name) ->`` the group's PodGroup object, if its CRD is
            installed (``cluster.podgroups.PodGroupReader``); None: annotations only.
    """

    timeout_s: float = GANG_TIMEOUT_S
    max_members: int = MAX_MEMBERS
    wake: Callable[[Sequence[tuple[str, str]]], None] | None = None
    pod_groups: Callable[[str, str], PodGroupSpec | None] | None = None


@attrs.frozen
class Group:
    """A pod's group: ``namespace/name`` and the minimum its pod states (None: none)."""

    namespace: str
    name: str
    min_member: int | None

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def group_of(pod: Mapping[str, Any], *, max_members: int = MAX_MEMBERS) -> Group | None:
    """The pod's group, or None when it is in none.

    Reads the ``scheduling.x-k8s.io/pod-group`` label (scheduler-plugins), else the
    ``scheduling.k8s.io/group-name`` annotation (Volcano), and ``hami.io/gang-min-member``
    (a positive integer up to ``max_members``).

    Raises:
        InvalidInputError: a group name that is not a string, or a bad minimum.
    """
    name = group_name(pod)  # a malformed pod's metadata: None (the shape check names it)
    if name is None:
        return None
    meta = pod.get("metadata") or {}
    ann = meta.get("annotations") or {}
    raw = ann.get(keys.GANG_MIN_MEMBER)
    minimum: int | None = None
    if raw is not None:
        try:
            minimum = int(str(raw).strip())
        except ValueError:
            minimum = 0
        if not 1 <= minimum <= max_members:
            raise InvalidInputError(
                f"pod {pod_ref(pod)}: {keys.GANG_MIN_MEMBER} must be an integer from 1 to "
                f"{max_members}, not {raw!r}"
            )
    return Group(namespace=str(meta.get("namespace") or "default"), name=name, min_member=minimum)


@attrs.define
class Reservation:
    """One member's reserved node, until ``deadline`` (``time.monotonic``)."""

    group: Group
    node: str
    deadline: float


@attrs.frozen
class Shortfall:
    """Why a group does not fit: the wire reason every member's filter answers."""

    group: Group
    message: str

    @property
    def reason(self) -> str:
        return f"{ReasonCode.GROUP_DOES_NOT_FIT.value} (group {self.group}: {self.message})"


class Gangs:
    """The gang stage of one scheduler (module docstring). Thread-safe: everything runs
    under the state lock, so a placement sees one snapshot of usage."""

    def __init__(
        self,
        store: ClusterStore,
        state: ClusterState,
        manager: BackendManager,
        judge: Callable[[Mapping[str, Any], Sequence[str]], FilterResult],
        reader: HoldingsReader,
        events: Any,
        options: GangOptions,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args:
        judge: ``(pod, node names) -> FilterResult``: the filter engine on those nodes.
        reader: what a pod holds and its quota charge (``HoldingsReader``).
        events: where events go (``record_event``).
        options: timeout, largest group, wake (``GangOptions``).
        monotonic: the clock of reservations' deadlines.
        """
        self.store = store
        self.state = state
        self.manager = manager
        self.judge = judge
        self.reader = reader
        self.events = events
        self.timeout_s = options.timeout_s
        self.max_members = options.max_members
        self.wake = options.wake if options.wake is not None else self._wake_by_update
        self.pod_groups = options.pod_groups
        self.monotonic = monotonic
        self._reserved: dict[str, Reservation] = {}  # pod uid -> its reservation
        self._waiting: dict[str, float] = {}  # group -> when it was last refused
        self.placed_total = 0
        self.refused_total = 0
        self.expired_total = 0

    # -- reading ---------------------------------------------------------------------

    def group_of(self, pod: Mapping[str, Any]) -> Group | None:
        """``group_of`` with this scheduler's bound. Raises ``InvalidInputError``."""
        return group_of(pod, max_members=self.max_members)

    def member(self, pod: Mapping[str, Any]) -> Group | None:
        """The pod's group when it asks managed devices (a pod that asks none is not
        ours to hold back), else None. Raises ``InvalidInputError``."""
        group = self.group_of(pod)
        if group is None or not read_pod_request(pod, self.manager).wants_devices:
            return None
        return group

    def bind(
        self,
        namespace: str,
        name: str,
        *,
        uid: str,
        node: str,
        bind: Callable[..., Allocation | None],
    ) -> Allocation | None:
        """``bind(namespace, name, uid=, node=, lock_wait_s=)`` (``Binder.bind``) for a
        member with its group's reservation on ``node`` (``admit_bind``), waiting up to
        ``GANG_LOCK_WAIT_S`` for a fellow member's node lock; a pod in no group (or a
        retried bind of a bound one) binds as any other.

        Raises:
            ConflictError: the group does not fit, or reserved the pod elsewhere; and
            what ``bind`` raises.
        """
        pod = self.store.get_pod(namespace, name)
        group = self.member(pod)
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if group is None or meta.get("uid") != uid or spec.get("nodeName"):
            return bind(namespace, name, uid=uid, node=node)
        wait = self.admit_bind(pod, group, node)
        lock_wait = None if wait is None else min(wait, GANG_LOCK_WAIT_S)
        allocation = bind(namespace, name, uid=uid, node=node, lock_wait_s=lock_wait)
        self.bound(uid)
        return allocation

    def waiting(self) -> int:
        """Groups whose last placement was refused and that still have pending members."""
        with self.state.lock:
            self._forget_waiting()
            return len(self._waiting)

    def _forget_waiting(self) -> None:
        # kube-scheduler retries an unschedulable pod within 60 s: a group not refused
        # for twice that has no member left waiting (deleted, or placed)
        now = self.monotonic()
        for group in [g for g, t in self._waiting.items() if now - t > WAITING_FORGET_S]:
            del self._waiting[group]

    def reserved(self) -> dict[str, Reservation]:
        """Pod uid -> its live reservation (a copy)."""
        with self.state.lock:
            self._expire()
            return dict(self._reserved)

    # -- the stage -------------------------------------------------------------------

    def filter(self, pod: Mapping[str, Any], group: Group, names: Sequence[str]) -> FilterResult:
        """The member's filter answer: its reserved node (placing the group first when
        it has no reservation and the group is short of its minimum), or every node
        failed with ``GroupDoesNotFit`` and nothing held."""
        uid = _uid(pod)
        woken: list[tuple[str, str]] = []
        spec = self._spec(group)  # an API read, never under the state lock
        with self.state.lock:
            self._expire()
            mine = self._reserved.get(uid)
            if mine is None:
                outcome = self._place(pod, group, names, names, spec)
                if isinstance(outcome, Shortfall):
                    return self._refuse(pod, outcome, names)
                if outcome is None:  # the group has its minimum: an ordinary pod
                    return self.judge(pod, names)
                mine, woken = outcome
            result = self._on_reserved(pod, mine, names)
        if woken:
            self.wake(woken)
        return result

    def admit_bind(self, pod: Mapping[str, Any], group: Group, node: str) -> float | None:
        """Let a member's bind to ``node`` through: it has a reservation there (or the
        group is placed now with this member on ``node``: a leader that did not place
        it, after a failover), or its group has its minimum already. Returns how long
        its bind may wait for the node lock (a fellow member's bind on the same node),
        None for an ordinary bind.

        Raises:
            ConflictError: reserved on another node, or the group does not fit.
        """
        uid = _uid(pod)
        woken: list[tuple[str, str]] = []
        spec = self._spec(group)
        with self.state.lock:
            self._expire()
            mine = self._reserved.get(uid)
            if mine is None:
                outcome = self._place(pod, group, [node], self.state.node_names(), spec)
                if isinstance(outcome, Shortfall):
                    raise ConflictError(f"pod {pod_ref(pod)}: {outcome.reason}")
                if outcome is not None:
                    mine, woken = outcome
            if mine is not None and mine.node != node:
                raise ConflictError(
                    f"pod {pod_ref(pod)}: {ReasonCode.GROUP_MEMBER_RESERVED.value} "
                    f"(group {group} reserved it on {mine.node}, not {node})"
                )
            wait = None if mine is None else max(0.0, mine.deadline - self.monotonic())
        if woken:
            self.wake(woken)
        return wait

    def bound(self, uid: str) -> None:
        """Pod ``uid`` was bound: its own allocation speaks for it now."""
        with self.state.lock:
            self._reserved.pop(uid, None)
            self.state.unhold(uid)

    # -- placing ---------------------------------------------------------------------

    def _spec(self, group: Group) -> PodGroupSpec | None:
        """The group's PodGroup object, when a reader is set and its CRD answers."""
        if self.pod_groups is None:
            return None
        return self.pod_groups(group.namespace, group.name)

    def _place(
        self,
        pod: Mapping[str, Any],
        group: Group,
        names: Sequence[str],
        others: Sequence[str],
        spec: PodGroupSpec | None = None,
    ) -> Shortfall | tuple[Reservation, list[tuple[str, str]]] | None:
        """Place the group with ``pod`` among the members (``pod`` on ``names``, the
        other members on ``others``), or say why not. None: the group has its minimum
        (bound and reserved members) without this pod, which is then an ordinary pod.
        The minimum is the largest of the members' annotations and the PodGroup's
        ``minMember`` (``spec``); its ``scheduleTimeoutSeconds`` shortens the timeout."""
        uid = _uid(pod)
        found = self._members(group)
        members = [p for p, _ in found]
        minimum = max([g.min_member or 0 for _, g in found] + [group.min_member or 0])
        if spec is not None and spec.min_member:
            if spec.min_member > self.max_members:
                return Shortfall(
                    group, f"PodGroup minMember {spec.min_member} is over {self.max_members}"
                )
            minimum = max(minimum, spec.min_member)
        if minimum < 1:
            return Shortfall(group, f"no minimum member count: set {keys.GANG_MIN_MEMBER}")
        bound = [p for p in members if (p.get("spec") or {}).get("nodeName")]
        held = [
            p for p in members if _uid(p) in self._reserved and _uid(p) != uid and not _bound(p)
        ]
        need = minimum - len(bound) - len(held)
        if need <= 0:
            return None
        pending = [
            p for p in members if not _bound(p) and _uid(p) not in self._reserved and _uid(p) != uid
        ]
        pending.sort(key=lambda p: (_created(p), pod_ref(p)))
        if 1 + len(pending) < need:
            return Shortfall(
                group,
                f"{len(bound)} bound, {len(held)} reserved and {1 + len(pending)} pending of "
                f"minMember {minimum}: waiting for {need - 1 - len(pending)} more",
            )
        made: list[tuple[Mapping[str, Any], str]] = []
        for member in [pod, *pending]:
            if len(made) == need:
                break
            result = self.judge(member, names if member is pod else others)
            best = result.best()
            if best is None:
                if member is pod:
                    break  # the member asked for must be placed itself
                continue
            allocation = result.fits[best].allocation
            assert allocation is not None
            self.state.hold(self._hold_for(member, allocation, why=f"gang {group}"))
            made.append((member, best))
        if len(made) < need:
            for member, _ in made:
                self.state.unhold(_uid(member))
            why = _first_miss(pod, made, names, self.judge)
            return Shortfall(
                group,
                f"{len(made)} of the {need} members still needed fit together "
                f"(minMember {minimum}, {len(bound)} bound){why}",
            )
        timeout = self.timeout_s
        if spec is not None and spec.timeout_s:
            timeout = min(timeout, spec.timeout_s)  # never longer than the setting
        deadline = self.monotonic() + timeout
        mine = None
        woken: list[tuple[str, str]] = []
        for member, node in made:
            reservation = Reservation(group=group, node=node, deadline=deadline)
            self._reserved[_uid(member)] = reservation
            if member is pod:
                mine = reservation
            else:
                meta = member.get("metadata") or {}
                woken.append((str(meta.get("namespace") or ""), str(meta.get("name") or "")))
            self._event(
                member,
                "Normal",
                "GroupPlaced",
                f"group {group}: {need} members reserved together; this one on {node} "
                f"for {timeout:.0f} s",
            )
        self._waiting.pop(str(group), None)
        self.placed_total += 1
        assert mine is not None
        return mine, woken

    def _members(self, group: Group) -> list[tuple[Mapping[str, Any], Group]]:
        """The live pods of the group's namespace in the group, of our scheduler, asking
        managed devices, each with the group as it states it."""
        ours = self.manager.config.scheduler_name
        out: list[tuple[Mapping[str, Any], Group]] = []
        for p in self.store.list_pods(namespace=group.namespace):
            if not is_live(p) or (p.get("spec") or {}).get("schedulerName") != ours:
                continue
            if (p.get("metadata") or {}).get("deletionTimestamp"):
                continue
            try:
                g = self.group_of(p)
                if g is None or g.name != group.name:
                    continue
                if not read_pod_request(p, self.manager).wants_devices:
                    continue
            except InvalidInputError:
                continue  # a member that cannot be read is refused on its own filter
            out.append((p, g))
        return out

    def _on_reserved(
        self, pod: Mapping[str, Any], mine: Reservation, names: Sequence[str]
    ) -> FilterResult:
        """The reserved member's answer: its node (re-fitted, its own hold left out),
        every other node failed. kube-scheduler 1.20 passes a rotating window of the
        nodes (``percentageOfNodesToScore``): when the window misses the reserved node,
        the reservation moves to the best node of the window that fits, else stays."""
        if mine.node not in names and names:
            self._move(pod, mine, names)
        result = self.judge(pod, [mine.node] if mine.node in names else [])
        other = (
            f"{ReasonCode.GROUP_MEMBER_RESERVED.value} "
            f"(group {mine.group} reserved this member on {mine.node})"
        )
        failed = dict(result.failed)
        for name in names:
            if name != mine.node:
                failed[name] = other
        return attrs.evolve(result, failed=failed)

    def _move(self, pod: Mapping[str, Any], mine: Reservation, names: Sequence[str]) -> None:
        """Move ``pod``'s reservation to the best node of ``names`` that fits it (its own
        hold left out while it is fitted), else leave it where it is."""
        old = self.state.unhold(_uid(pod))
        result = self.judge(pod, names)
        best = result.best()
        if best is not None:
            allocation = result.fits[best].allocation
            assert allocation is not None
            self.state.hold(self._hold_for(pod, allocation, why=f"gang {mine.group}"))
            mine.node = best
        elif old is not None:
            self.state.hold(old)

    def _refuse(
        self, pod: Mapping[str, Any], short: Shortfall, names: Sequence[str]
    ) -> FilterResult:
        self._waiting.pop(str(short.group), None)
        self._waiting[str(short.group)] = self.monotonic()
        if len(self._waiting) > 4096:  # many groups, no scrape: never grows unbounded
            self._forget_waiting()
        self.refused_total += 1
        self._event(pod, "Warning", "GroupWaiting", short.reason)
        return FilterResult(
            feasible=(),
            failed={n: short.reason for n in dict.fromkeys(names)},
            fits={},
            scores={},
            policies=self.judge(pod, []).policies,
        )

    def _expire(self) -> None:
        """Let go of the reservations past their deadline (their pods not bound)."""
        now = self.monotonic()
        holds = self.state.holds()
        for uid, r in list(self._reserved.items()):
            if uid not in holds:  # bound, deleted or finished: the state let go already
                del self._reserved[uid]
            elif r.deadline <= now:
                del self._reserved[uid]
                held = self.state.unhold(uid)
                self.expired_total += 1
                log.info(
                    "group %s: the reservation of pod %s/%s on %s expired",
                    r.group,
                    held.namespace if held else "",
                    held.name if held else uid,
                    r.node,
                )

    def _event(self, pod: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        try:
            self.events.record_event(pod, type=type_, reason=reason, message=message)
        except Exception as exc:  # events are best effort
            log.warning("cannot record event %s: %s", reason, exc)

    def _wake_by_update(self, members: Sequence[tuple[str, str]]) -> None:
        """Write ``hami.io/gang-placed`` on each member from a thread: kube-scheduler
        moves an unschedulable pod whose object changed back to its active queue (1.20
        ``PriorityQueue.Update``), instead of retrying it after up to 60 s."""
        stamp = str(time.time_ns())

        def run() -> None:
            for namespace, name in members:
                try:
                    self.store.patch_pod_metadata(
                        namespace, name, annotations={keys.GANG_PLACED: stamp}
                    )
                except Exception as exc:  # a member gone meanwhile: nothing to wake
                    log.info("cannot wake pod %s/%s: %s", namespace, name, exc)

        threading.Thread(target=run, name="gang-wake", daemon=True).start()

    def _hold_for(self, pod: Mapping[str, Any], allocation: Allocation, *, why: str) -> Hold:
        """The slices ``allocation`` would hold for ``pod``, as if it were bound."""
        bound = held_pod(pod, allocation, self.manager)
        node = self.state.node(allocation.node)
        assert node is not None  # the engine just fitted it, under the state lock
        meta = pod.get("metadata") or {}
        return Hold(
            uid=str(meta.get("uid") or ""),
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            node=allocation.node,
            holdings=self.reader.holdings(bound, node.info),
            quota=self.reader.quota_charge(bound),
            why=why,
        )


def held_pod(
    pod: Mapping[str, Any], allocation: Allocation, manager: BackendManager
) -> dict[str, Any]:
    """``pod`` as it would be bound with ``allocation``: what ``usage.pod_holdings`` and
    the quota charge read to know what a reservation holds (the allocation annotations,
    ``spec.nodeName``)."""
    meta = dict(pod.get("metadata") or {})
    ann = dict(meta.get("annotations") or {})
    for vendor, devices in allocation.devices.items():
        dtype = manager.device_type(vendor)
        ann[dtype.allocated_annotation] = encode_pod_devices(devices)
        instances = mig_allocations_of(devices)
        if dtype.mig_annotation and instances:
            ann[dtype.mig_annotation] = encode_mig_allocations(instances)
    meta["annotations"] = ann
    spec = dict(pod.get("spec") or {})
    spec["nodeName"] = allocation.node
    return {**pod, "metadata": meta, "spec": spec}


def _first_miss(
    pod: Mapping[str, Any],
    made: Iterable[tuple[Mapping[str, Any], str]],
    names: Sequence[str],
    judge: Callable[[Mapping[str, Any], Sequence[str]], FilterResult],
) -> str:
    """``; pod ns/x: <a node's reason>`` for the member asked for when it did not fit."""
    if any(m is pod for m, _ in made):
        return ""
    result = judge(pod, names)
    if not result.failed:
        return ""
    node, reason = sorted(result.failed.items())[0]
    return f"; pod {pod_ref(pod)} fits no node ({node}: {reason})"


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _bound(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _created(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("creationTimestamp") or "")


__all__ = [
    "GANG_LOCK_WAIT_S",
    "GANG_TIMEOUT_S",
    "MAX_MEMBERS",
    "GangOptions",
    "Gangs",
    "Group",
    "Reservation",
    "Shortfall",
    "group_of",
    "held_pod",
]
