"""CDI mode: hand kubelet CDI device names instead of env, mounts and device nodes.

The Container Device Interface (github.com/cncf-tags/container-device-interface,
SPEC.md) lets the runtime apply "container edits" from spec files in a directory it
watches (``/var/run/cdi`` by default). Limits here are per container, not per GPU, so
each answered container gets its own one-device spec file,
``<dir>/hami-<backend>-<pod UID>_<container>.json``, of kind ``hami.io/<backend>``
and device name ``<pod UID>_<container>``, holding exactly what the env / mounts /
device nodes answer would have held. Kubelet >= 1.28 passes the names through
``ContainerAllocateResponse.cdi_devices``; older kubelets ignore that field, so the same
names also go into the annotation ``cdi.k8s.io/hami-<backend>`` that containerd >= 1.7
and CRI-O read. Spec files of pods no longer on the node are removed by ``sweep``.

Not a replacement for a vendor's container toolkit: the spec holds only what the
backend's answer holds. NVIDIA's answer has no device nodes and no driver libraries
(``/dev/nvidia*``, ``libcuda.so`` come from NVIDIA's toolkit acting on
``NVIDIA_VISIBLE_DEVICES``), and no container runtime consumes these specs in a test.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from hami_core.errors import InvalidInputError
from hami_core.model import ContainerAllocation

#: The CDI spec version written (mounts, env and device nodes exist since 0.3.0).
CDI_VERSION = "0.6.0"
#: CDI device names: SPEC.md "name" rule.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")


@attrs.frozen(kw_only=True)
class CdiWriter:
    """Writes one CDI spec per answered container.

    Attributes:
        spec_dir: the directory the container runtime reads CDI specs from.
        backend: the backend name; the CDI kind is ``hami.io/<backend>``.
    """

    spec_dir: Path
    backend: str

    @property
    def kind(self) -> str:
        """``hami.io/<backend>``."""
        return f"hami.io/{self.backend}"

    @property
    def annotation(self) -> str:
        """Container annotation carrying the CDI names for runtimes that read them."""
        return f"cdi.k8s.io/hami-{self.backend}"

    def spec_path(self, pod_uid: str, container: str) -> Path:
        """Where the spec of one container is written."""
        return self.spec_dir / f"hami-{self.backend}-{pod_uid}_{container}.json"

    def write(
        self, *, pod_uid: str, container: str, allocation: ContainerAllocation
    ) -> ContainerAllocation:
        """Write the spec of one container and return the CDI form of ``allocation``:
        no env, mounts or device nodes; ``cdi_devices`` = our device then any the backend
        named; the backend's annotations plus ``cdi.k8s.io/hami-<backend>``.

        Raises:
            InvalidInputError: the pod UID or container name cannot form a CDI name.
            OSError: the spec cannot be written.
        """
        name = f"{pod_uid}_{container}"
        if not _NAME.match(name):
            raise InvalidInputError(f"{name!r} is not a valid CDI device name")
        spec = {
            "cdiVersion": CDI_VERSION,
            "kind": self.kind,
            "devices": [{"name": name, "containerEdits": container_edits(allocation)}],
        }
        _write_atomic(self.spec_path(pod_uid, container), spec)
        names = (f"{self.kind}={name}", *allocation.cdi_devices)
        return ContainerAllocation(
            cdi_devices=names,
            annotations={**allocation.annotations, self.annotation: ",".join(names)},
        )

    def sweep(self, live_pod_uids: Iterable[str]) -> list[Path]:
        """Remove this backend's spec files of pods not in ``live_pod_uids``.

        Returns: the files removed.
        """
        live = set(live_pod_uids)
        prefix = f"hami-{self.backend}-"
        removed: list[Path] = []
        try:
            entries = list(self.spec_dir.iterdir())
        except FileNotFoundError:
            return removed
        for path in entries:
            if not (path.name.startswith(prefix) and path.name.endswith(".json")):
                continue
            uid, sep, _ = path.name.removeprefix(prefix).partition("_")
            if sep and uid not in live:
                path.unlink(missing_ok=True)
                removed.append(path)
        return removed


def container_edits(allocation: ContainerAllocation) -> dict[str, Any]:
    """CDI ``containerEdits`` equal to an env / mounts / device nodes answer."""
    edits: dict[str, Any] = {}
    if allocation.envs:
        edits["env"] = [f"{k}={v}" for k, v in sorted(allocation.envs.items())]
    if allocation.device_nodes:
        edits["deviceNodes"] = [
            {"path": d.container_path, "hostPath": d.host_path, "permissions": d.permissions}
            for d in allocation.device_nodes
        ]
    if allocation.mounts:
        edits["mounts"] = [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "options": ["ro" if m.read_only else "rw", "nosuid", "nodev", "bind"],
            }
            for m in allocation.mounts
        ]
    return edits


def _write_atomic(path: Path, spec: dict[str, Any]) -> None:
    # Runtimes watch the directory: never let them read a half-written file.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(spec, f, indent=2, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
