"""Backend-specific configuration keys of the ``cambricon`` section (``option_defaults``).

Example (these are the defaults)::

    cambricon:
      acceptModelQualifiedNames: true   # read cambricon.com/<model>.smlu.vmemory / .vcore
      runtimeClassName: ""              # set the pod's RuntimeClass at admission ("" = no)
      cnmonCommand: "cnmon info"        # discovery: the command whose output is parsed
      cnmonTimeoutSeconds: 30
      useContainerRuntime: true         # env only (cambricon-container-toolkit); false:
                                        # also expose /dev/cambricon_* device nodes
      mountCnmonPath: ""                # host cnmon binary to mount read-only ("" = no)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import ConfiguredTool

ACCEPT_QUALIFIED = "acceptModelQualifiedNames"
RUNTIME_CLASS = "runtimeClassName"
CNMON_COMMAND = "cnmonCommand"
CNMON_TIMEOUT_S = "cnmonTimeoutSeconds"
USE_RUNTIME = "useContainerRuntime"
MOUNT_CNMON = "mountCnmonPath"

OPTION_DEFAULTS: Mapping[str, Any] = {
    ACCEPT_QUALIFIED: True,
    RUNTIME_CLASS: "",
    CNMON_COMMAND: "cnmon info",
    CNMON_TIMEOUT_S: 30.0,
    USE_RUNTIME: True,
    MOUNT_CNMON: "",
}

#: The discovery tool: its command line and timeout are the options above.
CNMON = ConfiguredTool(command_key=CNMON_COMMAND, timeout_key=CNMON_TIMEOUT_S)
