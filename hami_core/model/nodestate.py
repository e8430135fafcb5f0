"""Node-local records a backend keeps between ``Allocate`` calls, kept by the core.

Some runtimes need choices that must stay disjoint across the containers of one node
(AMD: the CU range of each ``HSA_CU_MASK``), so ``hami_allocate`` must remember what it
handed out. A backend never opens host files for that: the core hands the hook a
``NodeState`` and decides where the records live (the device plugin: JSON files under
``--state-dir``; ``hami simulate`` and tests: ``MemoryNodeState``, nothing on the host).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from typing import Any, Final, Protocol

#: A record's name: a file name stem, no path separator.
NAME_PATTERN: Final = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


class NodeState(Protocol):
    """Named JSON records of one node (``{str: JSON value}`` each)."""

    def read(self, name: str) -> dict[str, Any]:
        """The record ``name``; ``{}`` when it was never written or cannot be read."""

    def write(self, name: str, data: Mapping[str, Any]) -> None:
        """Replace the record ``name`` with ``data`` (JSON-serialisable), atomically.

        Raises:
            ValueError: ``name`` is not a plain name (``NAME_PATTERN``).
            TypeError: ``data`` is not JSON-serialisable.
            OSError: the record cannot be stored (device plugin).
        """


def check_name(name: str) -> str:
    """``name`` when it is a plain record name (``NAME_PATTERN``).

    Raises:
        ValueError: it is not (empty, a path separator, upper case, too long).
    """
    if not NAME_PATTERN.match(name):
        raise ValueError(f"node state record name {name!r} is not [a-z0-9][a-z0-9._-]*")
    return name


class MemoryNodeState:
    """A ``NodeState`` in this process only (``hami simulate``, tests, the default)."""

    def __init__(self) -> None:
        self._records: dict[str, str] = {}
        self._lock = threading.Lock()

    def read(self, name: str) -> dict[str, Any]:
        with self._lock:
            text = self._records.get(check_name(name))
        data = json.loads(text) if text is not None else {}
        return data if isinstance(data, dict) else {}

    def write(self, name: str, data: Mapping[str, Any]) -> None:
        text = json.dumps(dict(data), sort_keys=True)
        with self._lock:
            self._records[check_name(name)] = text


class ScopedNodeState:
    """One backend's view of a ``NodeState``: its records are ``<backend>.<name>``, so
    two backends on one node never read each other's."""

    def __init__(self, state: NodeState, backend: str) -> None:
        self._state = state
        self._prefix = check_name(backend)

    def read(self, name: str) -> dict[str, Any]:
        return self._state.read(f"{self._prefix}.{check_name(name)}")

    def write(self, name: str, data: Mapping[str, Any]) -> None:
        self._state.write(f"{self._prefix}.{check_name(name)}", data)
