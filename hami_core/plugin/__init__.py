"""The plugin system: hook specs, the public ``hookimpl`` marker and ``BackendManager``.

Backends mark implementations with ``@hookimpl`` and register an entry point in the
group ``hami.backends``; the rest of the code reaches them only through
``BackendManager``.
"""

import pluggy

from .hookspecs import PROJECT, reads_pod_annotations

hookimpl = pluggy.HookimplMarker(PROJECT)

from .manager import ENTRY_POINT_GROUP, BackendManager, BackendRecord  # noqa: E402

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendManager",
    "BackendRecord",
    "hookimpl",
    "reads_pod_annotations",
]
