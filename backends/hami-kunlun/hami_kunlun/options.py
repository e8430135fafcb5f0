"""Backend-specific configuration keys of the ``kunlun`` section (``option_defaults``).

Example (these are the defaults)::

    kunlun:
      resourceWholeCardName: kunlunxin.com/xpu   # whole-card mode count resource
      memoryTiersMiB: [24576, 49152, 98304]      # vXPU sizes; the last one is the whole card
      topologyAware: true                        # P800 OAM 8-card groups for whole cards
      runtimeClassName: ""                       # set the pod's RuntimeClass ("" = no)
      xpuSmiCommand: xpu-smi                     # discovery: the command whose output is parsed
      xpuSmiTimeoutSeconds: 30
      useContainerRuntime: true                  # env only (xpu-container-toolkit); false:
                                                 # also expose /dev/xpu<i> and /dev/xpuctrl
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from hami_core.backend import ConfigError, ConfiguredTool, VendorConfig

WHOLE_CARD_RESOURCE = "resourceWholeCardName"
MEMORY_TIERS = "memoryTiersMiB"
TOPOLOGY_AWARE = "topologyAware"
RUNTIME_CLASS = "runtimeClassName"
XPU_SMI_COMMAND = "xpuSmiCommand"
XPU_SMI_TIMEOUT_S = "xpuSmiTimeoutSeconds"
USE_RUNTIME = "useContainerRuntime"

#: P800 partition sizes, MiB: 1/4 card, 1/2 card, whole card (HAMi ``trimMemory`` and
#: ``KunlunMaxMemory = 98304``; HAMi's Kunlunxin guide: "XPU P800-OAM supports 1/4 and 1/2
#: partitions; memory up to 24576M aligns to 24576M, up to 49152M to 49152M, above that
#: the whole card").
DEFAULT_TIERS_MIB = (24576, 49152, 98304)

OPTION_DEFAULTS: Mapping[str, Any] = {
    WHOLE_CARD_RESOURCE: "kunlunxin.com/xpu",
    MEMORY_TIERS: list(DEFAULT_TIERS_MIB),
    TOPOLOGY_AWARE: True,
    RUNTIME_CLASS: "",
    XPU_SMI_COMMAND: "xpu-smi",
    XPU_SMI_TIMEOUT_S: 30.0,
    USE_RUNTIME: True,
}

#: The discovery tool: its command line and timeout are the options above.
XPU_SMI = ConfiguredTool(command_key=XPU_SMI_COMMAND, timeout_key=XPU_SMI_TIMEOUT_S)


def check_config(config: VendorConfig) -> None:
    """``hami_check_config``: the section's backend-specific values, at load.

    Raises:
        ConfigError: ``memoryTiersMiB`` is not a non-empty, strictly ascending list of
            positive integers.
    """
    raw = config.options[MEMORY_TIERS]
    if (
        not isinstance(raw, list | tuple)
        or not raw
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in raw)
        or any(a >= b for a, b in itertools.pairwise(raw))
    ):
        raise ConfigError(
            f"kunlun.{MEMORY_TIERS}: expected a strictly ascending list of MiB sizes, got {raw!r}"
        )


def memory_tiers(config: VendorConfig) -> tuple[int, ...]:
    """The vXPU sizes in MiB, ascending (checked by ``check_config``); the last one is
    the whole card."""
    return tuple(config.options[MEMORY_TIERS])
