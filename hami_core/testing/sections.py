"""Build a backend's configuration section as the ``BackendManager`` hands it to hooks."""

from __future__ import annotations

from typing import Any

from hami_core.plugin import BackendManager
from hami_core.protocol.config import HamiConfig, VendorConfig


def section(plugin: object, **fields: Any) -> VendorConfig:
    """The complete, checked section ``plugin``'s hooks receive for a file stating
    ``fields`` (``VendorConfig`` attributes; ``options`` holds the backend-specific keys
    the file states, the rest keep the backend's ``option_defaults``).

    Raises:
        ConfigError: the backend's ``hami_check_config`` refuses the section.
        BackendError: ``plugin`` is not a valid backend.
    """
    info = plugin.hami_backend_info()  # type: ignore[attr-defined]
    stated = VendorConfig(**fields)
    manager = BackendManager.from_plugins(
        {info.name: plugin}, config=HamiConfig(vendors={info.name: stated})
    )
    return manager.vendor_config(info.name)
