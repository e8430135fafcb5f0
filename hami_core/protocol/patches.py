"""RFC 6902 JSON-patch operations the webhook's backends share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def pointer_token(key: str) -> str:
    """Escape one JSON-pointer token (RFC 6901): ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


def set_resources(
    container: Mapping[str, Any], container_path: str, values: Mapping[str, object]
) -> list[dict[str, Any]]:
    """Operations that make both ``limits`` and ``requests`` of a container carry
    ``values`` (resource name -> quantity), creating the maps that are missing and
    leaving entries that already hold the value alone.

    Args:
        container: the container as it is in the pod.
        container_path: its JSON pointer, e.g. ``/spec/containers/1``.
        values: the quantities to write.
    """
    resources = container.get("resources")
    patch: list[dict[str, Any]] = []
    if resources is None:
        patch.append({"op": "add", "path": f"{container_path}/resources", "value": {}})
        resources = {}
    for section in ("limits", "requests"):
        current = resources.get(section)
        if current is None:
            patch.append(
                {"op": "add", "path": f"{container_path}/resources/{section}", "value": {}}
            )
            current = {}
        for name, value in values.items():
            if current.get(name) != value:
                patch.append(
                    {
                        "op": "add",
                        "path": f"{container_path}/resources/{section}/{pointer_token(name)}",
                        "value": value,
                    }
                )
    return patch
