"""Leader election on a ``coordination.k8s.io/v1`` Lease.

Only the leader binds and writes. The algorithm is client-go's ``leaderelection``:
the holder renews ``renewTime`` every ``retry_period_s``; a candidate takes the lease
over when the record it observed has not changed for ``lease_duration_s`` (measured
on the candidate's own monotonic clock, so clock skew between hosts does not matter);
every write carries the ``resourceVersion`` it read, so two candidates cannot both
win. A leader that cannot renew within ``renew_deadline_s`` stops acting as leader.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
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
