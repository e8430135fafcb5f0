"""Which pod and container a host process belongs to, from its cgroup (issue 24 item 19).

The kernel writes ``/proc/<pid>/cgroup``; a tenant cannot (short of a privileged pod
that remounts cgroupfs), so it is what the monitor trusts to attribute a process that
NVML lists on a GPU. kubelet puts each pod in a cgroup named after its UID and the
runtime puts each container in one named after its ID, under both cgroup drivers and
both cgroup versions (Kubernetes "About cgroup v2", kubelet ``cgroupDriver``):

- cgroupfs driver: ``/kubepods/burstable/pod<uid>/<container id>`` (v1 lines
  ``N:<controllers>:<path>``, v2 one line ``0::<path>``);
- systemd driver: ``/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid with _ for ->.slice/cri-containerd-<id>.scope``
  (containerd; CRI-O ``crio-<id>.scope``; Docker ``docker-<id>.scope``).

A path seen from inside a cgroup namespace (the monitor's own container on cgroup v2)
is relative (``/../../kubepods-...``); the pod and container parts are found wherever
they sit. Container IDs are 64 hex digits (containerd, CRI-O, Docker).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import attrs

#: ``pod<uid>`` in a path component; the systemd driver writes the UID with ``_``.
_POD = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$"
)
#: A container's component: the bare ID (cgroupfs) or ``<runtime>-<id>.scope`` (systemd).
_CONTAINER = re.compile(
    r"^(?:(?:cri-containerd|crio|docker|containerd)-)?([0-9a-f]{64})(?:\.scope)?$"
)
#: Most bytes of ``/proc/<pid>/cgroup`` read (a v1 host has a dozen short lines).
MAX_CGROUP_BYTES = 64 * 1024


@attrs.frozen
class ContainerRef:
    """A process's pod UID (dashed, as in ``metadata.uid``) and container ID (64 hex
    digits, as in ``status.containerStatuses[].containerID`` after ``<runtime>://``)."""

    pod_uid: str
    container_id: str


def parse_cgroup(text: str) -> ContainerRef | None:
    """The pod and container a ``/proc/<pid>/cgroup`` text names, or None (a host
    process, a pod's sandbox, a path of no known shape).

    Every line (v1: one per hierarchy; v2: ``0::``) is looked at; the first that names
    both a pod and, in a component below it, a container wins.
    """
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        components = parts[2].split("/")
        for i, component in enumerate(components):
            pod = _POD.search(component)
            if pod is None:
                continue
            for below in components[i + 1 :]:
                ctr = _CONTAINER.match(below)
                if ctr is not None:
                    return ContainerRef(pod.group(1).replace("_", "-"), ctr.group(1))
            break
    return None


def container_of(pid: int, proc_root: str = "/proc") -> ContainerRef | None:
    """``parse_cgroup`` of a process's ``<proc_root>/<pid>/cgroup``; None when it is
    gone, unreadable or of no pod. Reads at most ``MAX_CGROUP_BYTES``."""
    try:
        fd = os.open(f"{proc_root}/{int(pid)}/cgroup", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, MAX_CGROUP_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return parse_cgroup(data.decode("utf-8", "replace"))


def in_host_pid_namespace(proc_root: str = "/proc") -> bool:
    """Whether this process sees the host's PIDs, as NVML reports them: its ``NSpid``
    (``/proc/self/status``, Linux >= 4.1) has one entry only in the initial PID
    namespace. Without ``hostPID`` the pids NVML gives name other processes here (or
    none), so nothing may be attributed by them. True when ``NSpid`` is absent (an older
    kernel: the DaemonSet's ``hostPID`` is then trusted)."""
    try:
        with open(f"{proc_root}/self/status", "rb") as f:
            status = f.read(MAX_CGROUP_BYTES)
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith(b"NSpid:"):
            return len(line.split()[1:]) == 1
    return True


def container_ids(pod: Mapping[str, Any]) -> dict[str, str]:
    """Container ID -> container name of a pod, from its status (``containerStatuses``,
    ``initContainerStatuses``, ``ephemeralContainerStatuses``; ``containerID`` is
    ``<runtime>://<id>``). Empty while the pod has none."""
    status = pod.get("status") or {}
    out: dict[str, str] = {}
    if not isinstance(status, Mapping):
        return out
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for s in status.get(key) or ():
            if not isinstance(s, Mapping):
                continue
            cid = str(s.get("containerID") or "")
            name = s.get("name")
            if "://" in cid and isinstance(name, str):
                out[cid.split("://", 1)[1]] = name
    return out
