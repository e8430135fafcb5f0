"""HAMi's NVIDIA device-plugin flags, applied to the ``nvidia`` section (HAMi 2.10
``cmd/device-plugin/nvidia/main.go``; its chart passes ``--mig-strategy`` and
``--disable-core-limit`` to the device plugin).

``--mig-strategy`` becomes the section's ``migstrategy`` (a node's entry of
``--node-config`` still overrides it, later); ``--disable-core-limit=true`` becomes
``corePolicy: disable`` (HAMi: ``GPU_CORE_UTILIZATION_POLICY=disable`` in the Allocate
answer, ``pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go``), while
``--disable-core-limit=false`` (the chart's default) keeps the configuration's
``corePolicy``.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import attrs

from hami_core.backend import DevicePluginFlags, VendorConfig

log = logging.getLogger(__name__)

#: The flags this backend reads (``BackendInfo.device_plugin_flags``).
FLAGS: Final = ("--mig-strategy", "--disable-core-limit")


def apply_flags(flags: DevicePluginFlags, config: VendorConfig) -> VendorConfig | None:
    """``config`` under ``flags`` (see the module docstring); None when they change
    nothing. Logs a warning when ``--disable-core-limit=true`` overrides a
    ``corePolicy`` the configuration states."""
    core_off = flags.disable_core_limit is True
    if flags.mig_strategy is None and not core_off:
        return None
    changes: dict[str, Any] = {}
    if flags.mig_strategy is not None:
        changes["mig_strategy"] = flags.mig_strategy
    if core_off:
        stated = config.options.get("corePolicy")
        if stated not in (None, "disable", "none"):
            log.warning("--disable-core-limit=true overrides nvidia.corePolicy %s", stated)
        changes["options"] = {**config.options, "corePolicy": "disable"}
    return attrs.evolve(config, **changes)
