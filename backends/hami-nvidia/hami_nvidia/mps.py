"""MPS limits held by the control daemon, per container (``mpsIsolation: per-container``).

Facts from NVIDIA's "Multi-Process Service" guide (docs.nvidia.com/deploy/mps, Appendix
"Tools and Interface Reference"):

- the CUDA driver of a client connects to the control daemon listening in its
  ``CUDA_MPS_PIPE_DIRECTORY`` (default ``/tmp/nvidia-mps``); the daemon starts one MPS
  server per user ID, and a client of another user waits until that server exits; a
  client that finds no daemon runs without MPS;
- ``set_default_active_thread_percentage P`` and ``set_default_device_pinned_mem_limit
  DEV VALUE`` set what the next MPS server spawned applies to each of its clients;
  ``set_active_thread_percentage PID P`` / ``set_device_pinned_mem_limit PID DEV VALUE``
  change a running server, for clients that connect afterwards;
- a client's own ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` "will only further constrain the
  limit set by the control daemon"; ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` likewise lowers
  the device's pinned limit (what ``shim/tests/gpu/modes_check.py`` checks on a GPU);
- the limits apply to each client *process*, not to a group of them.

So limits a client cannot raise exist per server, and a server serves one daemon's
clients of one UID: one control daemon per container, set before the container starts,
gives each container server-side limits (NVIDIA's DRA driver runs one per MPS claim the
same way). This module starts that daemon at ``Allocate`` in a directory of its own under
``mpsPipeDirectory`` (mounted at ``/tmp/nvidia-mps``, so a client that drops
``CUDA_MPS_PIPE_DIRECTORY`` still finds it), sets and reads back the defaults, and quits
it once the pod is gone (``release``). What it cannot enforce is in
docs/sharing-modes.md ("What MPS enforces") and docs/threat-model.md.

Device memory limits are set by device *index* inside the daemon's
``CUDA_VISIBLE_DEVICES`` (the container's GPUs, in allocation order): NVIDIA's device
plugin found limits set by UUID not applied (NVIDIA/k8s-device-plugin PR #572).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import stat
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from hami_core.backend import HamiError, remove_tree

log = logging.getLogger(__name__)

#: Values of the ``nvidia.mpsIsolation`` option.
SHARED, PER_CONTAINER = "shared", "per-container"
ISOLATIONS = (SHARED, PER_CONTAINER)
#: Seconds one control command may take (the CLI connects to a local socket).
COMMAND_TIMEOUT_S = 10.0
#: Seconds a started daemon has to answer its first command.
START_TIMEOUT_S = 10.0
#: A directory younger than this is kept even if no listed pod owns it: the pod list may
#: trail the Allocate that made it (seconds).
GRACE_S = 120.0
#: Per-container directories: 20 hex digits of the SHA-256 of ``<pod UID>/<container>``.
#: Short on purpose: the daemon's socket ``<dir>/control`` must fit a UNIX socket path
#: (108 bytes with its NUL, unix(7)), and a container name alone may take 63.
_DIR = re.compile(r"^[0-9a-f]{20}$")
_SOCKET_PATH_MAX = 107
_CONTROL = "control"


class MpsError(HamiError):
    """The container's MPS control daemon could not be started or configured."""


@attrs.frozen(kw_only=True)
class MpsLimits:
    """What one container's MPS server applies to each of its clients.

    Attributes:
        threads_pct: active thread percentage of each device, 1..100.
        memory_mib: pinned device memory limit per device index in the daemon's
            ``CUDA_VISIBLE_DEVICES`` (MiB; the container's slices in order).
    """

    threads_pct: int
    memory_mib: tuple[int, ...]


@attrs.frozen(kw_only=True)
class ContainerDaemon:
    """A container's control daemon as recorded beside its directory (host only).

    Attributes:
        pod_uid, container: whose it is.
        uuids: the GPUs it serves (its ``CUDA_VISIBLE_DEVICES``).
        limits: what its server applies.
    """

    pod_uid: str
    container: str
    uuids: tuple[str, ...]
    limits: MpsLimits


def container_dir_name(pod_uid: str, container: str) -> str:
    """The per-container directory's name under ``mpsPipeDirectory`` (20 hex digits)."""
    return hashlib.sha256(f"{pod_uid}/{container}".encode()).hexdigest()[:20]


def check_root(root: str) -> str | None:
    """Why ``root`` cannot hold per-container pipe directories, or None when it can."""
    longest = len(f"{root.rstrip('/')}/{'0' * 20}/{_CONTROL}")
    if longest > _SOCKET_PATH_MAX:
        return (
            f"{root!r} is too long for per-container MPS pipe directories: their control "
            f"socket path would take {longest} bytes, a UNIX socket path at most "
            f"{_SOCKET_PATH_MAX}"
        )
    return None


def _env(pipe: str, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "CUDA_MPS_PIPE_DIRECTORY": pipe,
        **extra,
    }


def control(binary: str, pipe: str, command: str) -> str:
    """Send one command to the control daemon listening in ``pipe`` through NVIDIA's CLI
    (``echo COMMAND | nvidia-cuda-mps-control``); returns what it printed.

    The directory is the tenant's: ``<pipe>/control`` must be a socket, never a link (one
    to another container's socket would carry this command to that container's daemon:
    a ``quit`` of a neighbour). Checked before the CLI connects; a live tenant could still
    swap it in between, so a live container's daemon is never sent ``quit``.

    Raises:
        MpsError: the CLI is missing, fails, or takes longer than ``COMMAND_TIMEOUT_S``;
            ``<pipe>/control`` is not a socket; the message names the command and the
            daemon's directory.
    """
    why = _not_a_socket(pipe)
    if why:
        raise MpsError(f"MPS control daemon in {pipe}: {command!r} not sent: {why}")
    try:
        proc = subprocess.run(
            [binary],
            input=command + "\n",
            env=_env(pipe),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
    except FileNotFoundError:
        raise MpsError(f"MPS control {binary!r} not found (nvidia.mpsControlBinary)") from None
    except subprocess.TimeoutExpired:
        raise MpsError(
            f"MPS control daemon in {pipe}: {command!r} took over {COMMAND_TIMEOUT_S}s"
        ) from None
    except OSError as exc:
        raise MpsError(f"MPS control {binary!r}: {exc}") from None
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip()[:200]
        raise MpsError(f"MPS control daemon in {pipe}: {command!r} failed: {why}")
    return proc.stdout.strip()


def _not_a_socket(pipe: str) -> str:
    """Why ``<pipe>/control`` is not the daemon's socket ("" when it is one)."""
    try:
        mode = os.lstat(f"{pipe.rstrip('/')}/{_CONTROL}").st_mode
    except FileNotFoundError:
        return "no control socket"
    except OSError as exc:
        return f"control: {exc.strerror or exc}"
    if stat.S_ISLNK(mode):
        return "control is a symbolic link (not followed)"
    if not stat.S_ISSOCK(mode):
        return "control is not a socket"
    return ""


def _answers(binary: str, pipe: str) -> bool:
    try:
        control(binary, pipe, "get_default_active_thread_percentage")
    except MpsError:
        return False
    return True


_UNITS_MIB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def _mib(text: str) -> float | None:
    """MiB of a size as the daemon prints it (``2048M``, ``2G``, ``2048 MB``, ``2 GiB``)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT])(?:i?B)?", text.strip(), re.IGNORECASE)
    if m is None:
        return None
    return float(m.group(1)) * _UNITS_MIB[m.group(2).upper()]


def _configure(binary: str, pipe: str, limits: MpsLimits) -> None:
    """Set the server defaults and read them back (a daemon that did not take them is an
    error: the container must not start on a server without its limits)."""
    control(binary, pipe, f"set_default_active_thread_percentage {limits.threads_pct}")
    for i, mib in enumerate(limits.memory_mib):
        control(binary, pipe, f"set_default_device_pinned_mem_limit {i} {mib}M")
    got = control(binary, pipe, "get_default_active_thread_percentage")
    try:
        threads = float(got)
    except ValueError:
        threads = -1.0
    if abs(threads - limits.threads_pct) > 0.01:
        raise MpsError(
            f"MPS control daemon in {pipe}: active thread percentage reads {got!r}, "
            f"set {limits.threads_pct}"
        )
    for i, mib in enumerate(limits.memory_mib):
        got = control(binary, pipe, f"get_default_device_pinned_mem_limit {i}")
        read = _mib(got)
        if read is None or abs(read - mib) > 1:
            raise MpsError(
                f"MPS control daemon in {pipe}: device {i} pinned memory limit reads "
                f"{got!r}, set {mib}M"
            )


def _record_path(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}.json"


def _write_record(root: str, name: str, daemon: ContainerDaemon) -> None:
    path = _record_path(root, name)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(attrs.asdict(daemon), f)
    os.replace(tmp, path)


def _read_record(root: str, name: str) -> ContainerDaemon | None:
    """The record of directory ``name``; None when missing or unreadable (logged)."""
    path = _record_path(root, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd) as f:
            raw = json.loads(f.read(65536))
        limits = raw["limits"]
        return ContainerDaemon(
            pod_uid=str(raw["pod_uid"]),
            container=str(raw["container"]),
            uuids=tuple(str(u) for u in raw["uuids"]),
            limits=MpsLimits(
                threads_pct=int(limits["threads_pct"]),
                memory_mib=tuple(int(m) for m in limits["memory_mib"]),
            ),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("MPS daemon record %s unreadable: %s", path, exc)
        return None


def _start(binary: str, root: str, name: str, daemon: ContainerDaemon) -> str:
    pipe = f"{root.rstrip('/')}/{name}"
    logs = f"{pipe}.log"
    for d in (pipe, logs):
        os.makedirs(d, mode=0o755, exist_ok=True)
        if os.path.islink(d) or not os.path.isdir(d):
            raise MpsError(f"{d} is not a directory")
    if not _answers(binary, pipe):
        sock = f"{pipe}/{_CONTROL}"
        if _not_a_socket(pipe) not in ("", "no control socket"):
            # what the tenant left where the daemon's socket goes (a link, a file)
            with contextlib.suppress(OSError):
                os.unlink(sock)
        env = _env(pipe, CUDA_MPS_LOG_DIRECTORY=logs, CUDA_VISIBLE_DEVICES=",".join(daemon.uuids))
        try:
            proc = subprocess.run(
                [binary, "-d"], env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
            )
        except FileNotFoundError:
            raise MpsError(f"MPS control {binary!r} not found (nvidia.mpsControlBinary)") from None
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MpsError(f"starting the MPS control daemon in {pipe}: {exc}") from None
        if proc.returncode != 0:
            why = (proc.stderr or proc.stdout).strip()[:200]
            raise MpsError(f"starting the MPS control daemon in {pipe} failed: {why}")
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(binary, pipe):  # -d returns once forked, maybe before it listens
            if time.monotonic() > deadline:
                raise MpsError(
                    f"the MPS control daemon in {pipe} did not answer in {START_TIMEOUT_S}s"
                )
            time.sleep(0.1)
    _configure(binary, pipe, daemon.limits)
    return pipe


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _remove_tree(path: str) -> bool:
    """Remove ``path`` and everything below it; True when it is gone, False when what is
    left waits for the next round.

    The pipe directory is the tenant's (mounted writable): the kit's ``remove_tree``
    neither recurses nor follows a link, and holds a bounded number of descriptors
    whatever the tree's depth. Only ``path``'s parent (our ``mpsPipeDirectory``) is
    opened by name.
    """
    parent, name = os.path.split(path)
    try:
        parent_fd = os.open(parent or ".", _DIR_FLAGS)
    except OSError:
        return False
    try:
        return remove_tree(name, dir_fd=parent_fd)
    except OSError:
        return False
    finally:
        os.close(parent_fd)


def ensure(
    binary: str, root: str, pod_uid: str, container: str, uuids: Sequence[str], limits: MpsLimits
) -> str:
    """Make the container's control daemon run with ``limits`` as its server defaults.

    Called at ``Allocate``, before kubelet starts the container, so no client of this
    daemon has spawned its server yet and the defaults are what the server applies.
    Idempotent: a daemon already answering is configured again (the same values).

    Args:
        binary: the control CLI (``nvidia.mpsControlBinary``).
        root: ``nvidia.mpsPipeDirectory`` on the host.
        uuids: the container's GPUs in allocation order (the daemon's
            ``CUDA_VISIBLE_DEVICES``; ``limits.memory_mib`` is indexed the same way).
    Returns: the host path of the container's pipe directory.
    Raises:
        MpsError: the daemon cannot be started or did not take the limits.
    """
    name = container_dir_name(pod_uid, container)
    daemon = ContainerDaemon(
        pod_uid=pod_uid, container=container, uuids=tuple(uuids), limits=limits
    )
    os.makedirs(root, mode=0o755, exist_ok=True)
    _write_record(root, name, daemon)
    return _start(binary, root, name, daemon)


def release(
    binary: str,
    root: str,
    pods: Sequence[Mapping[str, Any]],
    clock: Callable[[], float] = time.time,
) -> list[str]:
    """Quit the daemons of containers whose pod is gone or finished, and restart those of
    live ones that stopped answering (a device plugin restart ends the daemons it
    started; their clients fail, and new clients must not find an empty directory and
    run without MPS).

    Args:
        pods: every pod bound to this node (``hami_release``'s list).
    Returns: one line per daemon quit or restarted (for the device plugin's log).
    Never raises: what cannot be done is logged and tried again on the next round.
    """
    live = {
        str((p.get("metadata") or {}).get("uid") or "")
        for p in pods
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    }
    try:
        names = sorted(n for n in os.listdir(root) if _DIR.match(n))
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("MPS pipe root %s unreadable: %s", root, exc)
        return []
    out: list[str] = []
    now = clock()
    for name in names:
        pipe = f"{root.rstrip('/')}/{name}"
        record = _read_record(root, name)
        try:
            age = now - os.stat(pipe, follow_symlinks=False).st_mtime
        except OSError:
            continue
        if record is not None and record.pod_uid in live:
            if not _answers(binary, pipe):
                try:
                    _start(binary, root, name, record)
                    out.append(
                        f"restarted the MPS control daemon of {record.pod_uid}/{record.container}"
                    )
                except MpsError as exc:
                    log.warning("%s", exc)
            continue
        if age < GRACE_S:
            continue
        with contextlib.suppress(MpsError):  # a daemon already gone
            control(binary, pipe, "quit")
        for path in (pipe, f"{pipe}.log"):
            if not _remove_tree(path):
                log.warning("could not remove all of %s (left for the next round)", path)
        with contextlib.suppress(OSError):
            os.unlink(_record_path(root, name))
        who = f"{record.pod_uid}/{record.container}" if record else name
        out.append(f"quit the MPS control daemon of {who}")
    return out
