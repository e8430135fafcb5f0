"""Leader election on a ``coordination.k8s.io/v1`` Lease.

Only the leader binds and writes. The algorithm is client-go's ``leaderelection``:
the holder renews ``renewTime`` every ``retry_period_s``; a candidate takes the lease
over when the record it observed has not changed for ``lease_duration_s`` (measured
on the candidate's own monotonic clock, so clock skew between hosts does not matter);
every write carries the ``resourceVersion`` it read, so two candidates cannot both
win. A leader that cannot renew within ``renew_deadline_s`` stops acting as leader.

``LeaseFollower`` takes no part in an election: it reads a Lease that another process
elects on (kube-scheduler beside the extender, in the chart) and says whether that
partner holds it.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client as k8s

from hami_core.errors import ConflictError, HamiError, NotFoundError

from .backoff import Backoff
from .kube import call

log = logging.getLogger(__name__)


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for a Lease in a background thread; ``is_leader()`` answers at once."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if not retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError("need retry_period_s < renew_deadline_s < lease_duration_s")
        self.api = k8s.CoordinationV1Api(api_client)
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.on_change = on_change
        self._lock = threading.Lock()
        self._leader = False
        self._last_renew = 0.0  # monotonic time of our last successful write as holder
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- public -----------------------------------------------------------------------

    def is_leader(self) -> bool:
        """True while we hold the lease and renewed it within ``renew_deadline_s``."""
        with self._lock:
            return self._leader and time.monotonic() - self._last_renew < self.renew_deadline_s

    def leader_identity(self) -> str | None:
        """The holder we last observed, or None."""
        with self._lock:
            return str(self._observed[0]) if self._observed and self._observed[0] else None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool = True) -> None:
        """Stop campaigning; a leader gives the lease up so a follower takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.retry_period_s * 2)
        if release and self.is_leader():
            try:
                lease = self._get()
                if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                    lease["spec"]["holderIdentity"] = ""
                    lease["spec"]["leaseDurationSeconds"] = 1
                    self._replace(lease)
            except HamiError as exc:
                log.warning("could not release lease %s: %s", self.name, exc)
        self._set_leader(False)

    def try_acquire_or_renew(self) -> bool:
        """One round of the election. Returns whether we are leader after it."""
        now_wall = dt.datetime.now(dt.UTC)
        now = time.monotonic()
        lease = self._get()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now_wall, transitions=0, acquire=now_wall),
            }
            try:
                call(
                    f"create lease {self.name}",
                    self.api.create_namespaced_lease,
                    self.namespace,
                    body,
                )
            except ConflictError:
                return False
            self._won(now)
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        with self._lock:
            if record != self._observed:
                self._observed, self._observed_at = record, now
            observed_at = self._observed_at
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration_s)
        if holder and holder != self.identity and now - observed_at < duration:
            self._set_leader(False)
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        acquire = spec.get("acquireTime") if holder == self.identity else _micro(now_wall)
        lease["spec"] = self._spec(now_wall, transitions=transitions, acquire=acquire)
        try:
            self._replace(lease)
        except ConflictError:
            return False
        self._won(now)
        return True

    # -- internals --------------------------------------------------------------------

    def _spec(self, now: dt.datetime, *, transitions: int, acquire: Any) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration_s),
            "acquireTime": acquire if isinstance(acquire, str) else _micro(acquire),
            "renewTime": _micro(now),
            "leaseTransitions": transitions,
        }

    def _get(self) -> dict[str, Any] | None:
        try:
            lease: dict[str, Any] = call(
                f"get lease {self.name}", self.api.read_namespaced_lease, self.name, self.namespace
            )
            return lease
        except NotFoundError:
            return None

    def _replace(self, lease: dict[str, Any]) -> None:
        call(
            f"update lease {self.name}",
            self.api.replace_namespaced_lease,
            self.name,
            self.namespace,
            lease,
        )

    def _won(self, now: float) -> None:
        with self._lock:
            self._last_renew = now
            self._observed = (self.identity, None, None)
            self._observed_at = now
        self._set_leader(True)

    def _set_leader(self, value: bool) -> None:
        with self._lock:
            changed = value != self._leader
            self._leader = value
        if changed:
            log.info(
                "%s %s leadership of lease %s/%s",
                self.identity,
                "took" if value else "lost",
                self.namespace,
                self.name,
            )
            if self.on_change is not None:
                self.on_change(value)

    def _run(self) -> None:
        # Rounds keep their period (a renewal must not wait longer), but an unreachable
        # API server is logged once when it starts failing and once when it recovers.
        state = Backoff(f"leader election on lease {self.namespace}/{self.name}", log)
        while not self._stop.is_set():
            try:
                self.try_acquire_or_renew()
                state.succeeded()
            except Exception as exc:  # API errors: keep campaigning; leadership lapses on its own
                state.failed(exc)
            if self._leader and not self.is_leader():
                self._set_leader(False)
            self._stop.wait(self.retry_period_s)


def _epoch(micro: Any) -> float | None:
    """A Lease's ``MicroTime`` (``2026-12-02T10:00:00.123456Z``) in Unix seconds; None
    when absent or not a time."""
    try:
        return dt.datetime.fromisoformat(str(micro).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def held_by(lease: Mapping[str, Any] | None, holder_prefix: str, now: float) -> bool:
    """Whether ``lease`` (a ``coordination.k8s.io/v1`` Lease as read; None: there is none)
    is held by an identity starting with ``holder_prefix`` and was renewed less than its
    ``spec.leaseDurationSeconds`` before ``now`` (Unix seconds, the clock that wrote
    ``renewTime``: the holder's). A released lease (holder "") or one without a
    renewal time or duration is held by nobody."""
    spec = (lease or {}).get("spec") or {}
    holder = str(spec.get("holderIdentity") or "")
    renewed = _epoch(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    if not holder.startswith(holder_prefix) or not holder_prefix or renewed is None:
        return False
    if not isinstance(duration, int | float) or isinstance(duration, bool):
        return False
    return now - renewed < float(duration)


class LeaseFollower:
    """Leadership read from a Lease another process elects on: this process leads while
    that Lease is held by its partner (``held_by``).

    What the chart runs: kube-scheduler elects on the Lease named after the scheduler and
    calls only the extender beside it in its pod, so that extender is the one whose own
    writes (preemption, consolidation, handshakes) are the leader's. kube-scheduler's
    identity is ``<hostname>_<uuid>`` (``makeLeaderElectionConfig``,
    ``cmd/kube-scheduler/app/options/options.go``, 1.20 on) and the two containers share
    the pod's hostname, so the partner's prefix is ``<hostname>_``. Its ``renewTime`` is
    written by the same host's clock that this one compares it with, and another
    replica takes the Lease over only once it went unrenewed for the Lease's duration,
    so "renewed within the duration" never says yes while another leads.

    ``read`` is called every ``period_s`` in a thread; ``is_leader`` answers at once
    from the last reading, judged at the time of the call (a reading that grew old, the
    API server unreachable since, says no).
    """

    def __init__(
        self,
        read: Callable[[], Mapping[str, Any] | None],
        *,
        holder_prefix: str,
        where: str = "the lease",
        period_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Args:
        read: the Lease now (None: it does not exist); raises ``HamiError`` when it
            cannot be read.
        holder_prefix: the partner's identity starts with it (not empty).
        where: the Lease's ``namespace/name``, for the log.
        clock: wall time (Unix seconds).

        Raises:
            ValueError: an empty ``holder_prefix`` or a ``period_s`` not above 0.
        """
        if not holder_prefix:
            raise ValueError("holder_prefix must not be empty")
        if period_s <= 0:
            raise ValueError("period_s must be above 0")
        self.read = read
        self.holder_prefix = holder_prefix
        self.where = where
        self.period_s = period_s
        self.clock = clock
        self._lock = threading.Lock()
        self._lease: Mapping[str, Any] | None = None
        self._was_leader = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def over(
        cls,
        api_client: k8s.ApiClient,
        *,
        namespace: str,
        name: str,
        holder_prefix: str,
        period_s: float = 1.0,
    ) -> LeaseFollower:
        """A follower of Lease ``namespace/name`` read through ``api_client`` (RBAC:
        ``get`` on that Lease)."""
        api = k8s.CoordinationV1Api(api_client)

        def read() -> Mapping[str, Any] | None:
            try:
                lease: Mapping[str, Any] = call(
                    f"get lease {namespace}/{name}", api.read_namespaced_lease, name, namespace
                )
                return lease
            except NotFoundError:
                return None

        return cls(
            read, holder_prefix=holder_prefix, where=f"{namespace}/{name}", period_s=period_s
        )

    def is_leader(self) -> bool:
        """True while the last reading shows the partner holding the Lease, renewed
        within its duration before now."""
        with self._lock:
            lease = self._lease
        return held_by(lease, self.holder_prefix, self.clock())

    def leader_identity(self) -> str | None:
        """The holder of the last reading, or None."""
        with self._lock:
            holder = ((self._lease or {}).get("spec") or {}).get("holderIdentity")
        return str(holder) if holder else None

    def poll(self) -> None:
        """Read the Lease once (``read``'s errors are raised; the last reading stays)
        and log a change of leadership."""
        lease = self.read()
        with self._lock:
            self._lease = lease
        leads = self.is_leader()
        if leads != self._was_leader:
            self._was_leader = leads
            log.info(
                "%s the leader: lease %s held by %s",
                "now" if leads else "no longer",
                self.where,
                self.leader_identity() or "nobody",
            )

    def start(self) -> LeaseFollower:
        self._thread = threading.Thread(target=self._run, name="lease-follower", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.period_s * 2)

    def _run(self) -> None:
        state = Backoff(f"reading lease {self.where}", log)
        while True:
            try:
                self.poll()
                state.succeeded()
            except Exception as exc:  # API errors: the reading ages and says no on its own
                state.failed(exc)
            if self._stop.wait(self.period_s):
                return
