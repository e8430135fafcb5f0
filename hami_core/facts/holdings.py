"""What one pod holds, as the scheduler's state and ``hami top`` read it: its devices on a
node (``usage.pod_holdings``) and its quota charge (``quota.pod_quota_charge``), both
under the trust rule of PROTOCOL.md §6, with the vendors a pod asks for kept per pod uid
(a pod's resources are immutable); ``ProblemLog`` logs each unreadable allocation once."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from hami_core.model import DeviceUsage, NodeInfo
from hami_core.plugin import BackendManager
from hami_core.protocol.documents import printable

from .quota import QuotaCharge, pod_quota_charge
from .usage import PodHoldings, node_usage, pod_holdings, requested_vendors


class Problems(Protocol):
    """Where unreadable allocations are reported (``ProblemLog``)."""

    def report(self, messages: Iterable[str]) -> None: ...


class ProblemLog:
    """Logs each unreadable allocation once per pod and reason, not per request."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._reported: set[str] = set()

    def report(self, messages: Iterable[str]) -> None:
        """Log each of ``messages`` (``pod ns/name: annotation: why``) not logged before."""
        for message in messages:
            if message not in self._reported:
                if len(self._reported) > 4096:
                    self._reported.clear()
                self._reported.add(message)
                # printable: a snapshot's pod name is not checked as an API server's is
                self._log.warning("unreadable allocation, failing closed: %s", printable(message))

    def drain(self, problems: list[str]) -> None:
        """Report and empty ``problems`` (``ClusterState.problems``)."""
        while problems:
            self.report([problems.pop(0)])


class HoldingsReader:
    """``ClusterState``'s ``holdings`` and ``quota_charge`` for one backend manager."""

    def __init__(self, manager: BackendManager, problems: Problems) -> None:
        self.manager = manager
        self.problems = problems
        self._types = manager.device_types()
        self._vendors_by_uid: dict[str, frozenset[str] | None] = {}
        # the same by the pod's requests (``BackendManager.request_key``): one reading
        # for the replicas of one Deployment when a cluster is read from scratch
        self._vendors_by_request: dict[tuple[Any, ...], frozenset[str]] = {}

    def holdings(self, pod: Mapping[str, Any], info: NodeInfo) -> PodHoldings:
        """What ``pod`` holds on ``info`` under the trust rule (``usage.pod_holdings``)."""
        return pod_holdings(
            pod,
            info,
            self._types,
            scheduler_name=self.manager.config.scheduler_name,
            requested_vendors=self.requested_vendors(pod),
        )

    def quota_charge(self, pod: Mapping[str, Any]) -> QuotaCharge:
        """What ``pod`` counts against its namespace's quotas (``quota.pod_quota_charge``)."""
        return pod_quota_charge(
            pod,
            self._types,
            scheduler_name=self.manager.config.scheduler_name,
            requested_vendors=self.requested_vendors(pod),
        )

    def usage_from_pods(
        self, info: NodeInfo, pods: Iterable[Mapping[str, Any]], *, exclude_uid: str | None
    ) -> dict[str, DeviceUsage]:
        """The usage of ``info``'s devices recomputed from ``pods`` (``usage.node_usage``;
        unreadable allocations fail closed and are reported once)."""
        broken: list[str] = []
        usage = node_usage(
            info,
            pods,
            self._types,
            scheduler_name=self.manager.config.scheduler_name,
            requested=self.requested_vendors,
            exclude_uid=exclude_uid,
            broken=broken,
        )
        self.problems.report(broken)
        return usage

    def requested_vendors(self, pod: Mapping[str, Any]) -> frozenset[str] | None:
        """``usage.requested_vendors``, kept per pod uid."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if uid and uid in self._vendors_by_uid:
            return self._vendors_by_uid[uid]
        key = self.manager.request_key(pod)
        vendors = self._vendors_by_request.get(key) if key is not None else None
        if vendors is None:
            vendors = requested_vendors(pod, self.manager)
            if key is not None and vendors is not None:  # an unreadable pod is read again
                if len(self._vendors_by_request) > 4096:
                    self._vendors_by_request.clear()
                self._vendors_by_request[key] = vendors
        if uid:
            if len(self._vendors_by_uid) > 65536:
                self._vendors_by_uid.clear()
            self._vendors_by_uid[uid] = vendors
        return vendors


__all__ = ["HoldingsReader", "ProblemLog", "Problems"]
