"""The device plugin's ``NodeState``: one JSON file per record under ``--state-dir``."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hami_core.model.nodestate import check_name

from .allocator import write_host_file


class FileNodeState:
    """Records as ``<root>/<name>.json``, written atomically (``write_host_file``: a
    temporary file renamed over the record, never following a link)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path(self, name: str) -> Path:
        """The file of record ``name``."""
        return self.root / f"{check_name(name)}.json"

    def read(self, name: str) -> dict[str, Any]:
        try:
            data = json.loads(self.path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def write(self, name: str, data: Mapping[str, Any]) -> None:
        write_host_file(str(self.path(name)), json.dumps(dict(data), sort_keys=True))
