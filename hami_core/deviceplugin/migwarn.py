"""Warnings about pods whose MIG reservation the device plugin cannot read.

A live pod's ``hami.io/vgpu-mig-allocations`` (the vendor's ``mig_annotation``) that does
not decode is skipped by the backend's release (it claims nothing by it; the instances
the device plugin gave the pod are still kept) and is reported once on the pod, as a
``Warning`` event ``MigReservationUnreadable``, so its owner sees why its instance may
be refused or freed. One report per pod and annotation value: a round does not repeat
it while the value stays the same.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from hami_core.cluster.base import ClusterStore, KubeObject
from hami_core.errors import HamiError
from hami_core.protocol.migallocations import decode_mig_allocations
from hami_core.protocol.pods import live_pod_uids, pod_ref

log = logging.getLogger(__name__)

REASON = "MigReservationUnreadable"


class UnreadableReservations:
    """Reports each live pod's unreadable MIG reservation once (see the module)."""

    def __init__(self, store: ClusterStore, annotation: str) -> None:
        """Args:
        store: where the events go (``record_event``).
        annotation: the vendor's MIG reservation key; "" reports nothing.
        """
        self.store = store
        self.annotation = annotation
        self._reported: set[tuple[str, int]] = set()

    def check(self, pods: Iterable[KubeObject]) -> list[str]:
        """Report the live pods of ``pods`` whose reservation does not decode and that
        were not reported for the same value before; forget pods no longer live.

        Returns: ``"<namespace>/<name>: <why>"`` for each pod reported now.
        """
        pods = list(pods)
        if not self.annotation:
            return []
        live = live_pod_uids(pods)
        out = []
        for pod in pods:
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            value = (meta.get("annotations") or {}).get(self.annotation)
            if uid not in live or not isinstance(value, str):
                continue
            mark = (uid, hash(value))
            if mark in self._reported:
                continue
            try:
                decode_mig_allocations(value)
            except HamiError as exc:
                message = (
                    f"{self.annotation} cannot be read ({exc}): this pod's MIG reservation "
                    "is skipped; the device plugin hands it no instance by it"
                )
                self._reported.add(mark)
                out.append(f"{pod_ref(pod)}: {exc}")
                try:
                    self.store.record_event(pod, type="Warning", reason=REASON, message=message)
                except HamiError as err:
                    log.warning("cannot report on pod %s: %s", pod_ref(pod), err)
        self._reported = {m for m in self._reported if m[0] in live}
        return out
