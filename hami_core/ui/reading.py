"""Where the web view reads the cluster: the API server (nodes, pods and ResourceQuotas,
listed once per refresh; nothing is watched or written) or a snapshot file, and the
page built from it kept for ``refresh_s`` so that many viewers cost one reading."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from hami_core.defrag.sources import DefragInput, list_cluster
from hami_core.errors import HamiError
from hami_core.explain.sources import from_file as explain_from_file
from hami_core.plugin import BackendManager
from hami_core.protocol.documents import shown_text

log = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class Reading:
    """One reading of the cluster.

    Attributes:
        read: nodes, bound pods and quotas (``cluster``) and our pending pods.
        quota_namespaces: namespaces whose quotas to show even without GPU pods (from
            the API server: those holding a ResourceQuota; from a file: the Namespace
            objects it lists).
    """

    read: DefragInput
    quota_namespaces: frozenset[str] = frozenset()


def from_api(kubeconfig: str | None, manager: BackendManager) -> Callable[[], Reading]:
    """A reader of what the API server lists now (nodes, pods, ResourceQuotas: three
    ``list`` calls, no write).

    Raises (when called):
        HamiError: the API server cannot be reached or refuses (the message says which).
    """
    from kubernetes import client as k8s

    from hami_core.cluster.kube import make_api_client

    core = k8s.CoreV1Api(make_api_client(kubeconfig))
    scheduler = manager.config.scheduler_name

    def read() -> Reading:
        listed = list_cluster(core, scheduler)  # no PDBs, Jobs or namespaces: not its RBAC
        return Reading(
            read=DefragInput(cluster=listed.cluster, pending=listed.pending),
            quota_namespaces=listed.quota_namespaces,
        )

    return read


def from_file(path: str | Path, manager: BackendManager) -> Callable[[], Reading]:
    """A reader of a snapshot file (``kubectl get nodes,pods,resourcequotas -A -o yaml``),
    read anew each time (it may be rewritten); what the loader leaves out is logged, once
    while the file says the same.

    Raises (when called):
        InvalidInputError: unreadable or malformed file (the message names it).
    """

    said: set[str] = set()  # warnings logged already: once while the file says the same

    def read() -> Reading:
        got, _ = explain_from_file(path, manager)
        for warning in got.warnings:  # what the loader left out, else silently missing
            if warning not in said and "no pending pods of" not in warning:
                log.warning("%s", shown_text(warning, 500))
        said.clear()
        said.update(got.warnings)
        return Reading(read=got, quota_namespaces=frozenset(got.namespace_labels))

    return read


class PageCache:
    """The page of the last reading, rebuilt in a background thread ``refresh_s`` after
    the previous rebuild ended (a reading of a large cluster can take longer than the
    refresh: viewers are served the last page meanwhile, never kept waiting for a new
    one). Until the first page is built a request waits for it, up to ``first_wait_s``.
    A failed rebuild keeps the last page, marked with the problem (``"problem"``)."""

    def __init__(
        self,
        build: Callable[[], dict[str, Any]],
        *,
        refresh_s: float,
        first_wait_s: float = 60.0,
    ) -> None:
        """``build``: makes the page (``page.build_page`` over a fresh reading); may raise
        ``HamiError``. Nothing is read before the first ``get``."""
        self._build = build
        self._refresh_s = refresh_s
        self._first_wait_s = first_wait_s
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._page: dict[str, Any] | None = None
        self._problem: str | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def get(self) -> dict[str, Any]:
        """The last page built.

        Raises:
            HamiError: no page yet, and the first rebuild failed or is still running
                after ``first_wait_s`` (the message says which).
        """
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="hami-ui-reader", daemon=True
                )
                self._thread.start()
        self._ready.wait(self._first_wait_s)
        with self._lock:
            page, problem = self._page, self._problem
        if page is None:
            raise HamiError(problem or "the first reading of the cluster is still running")
        return page

    def close(self) -> None:
        """Stop rebuilding (the thread ends after the rebuild in flight)."""
        self._stop.set()

    def _mark(self) -> None:
        """The last page, marked with the problem (a new object: answers encoded for
        the unmarked one are not reused); the caller holds the lock."""
        if self._page is not None:
            self._page = {**self._page, "problem": self._problem}

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                page = self._build()
            except HamiError as exc:
                log.warning("cannot read the cluster: %s", exc)
                with self._lock:
                    self._problem = str(exc)
                    self._mark()
            except Exception as exc:  # a bug must not end the rebuilds: say it, go on
                log.exception("building the page failed")
                with self._lock:
                    self._problem = f"building the page failed: {type(exc).__name__}"
                    self._mark()
            else:
                with self._lock:
                    self._page, self._problem = page, None
                log.debug("page rebuilt in %.3f s", time.monotonic() - started)
            self._ready.set()
            self._stop.wait(self._refresh_s)
