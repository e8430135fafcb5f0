"""Running a vendor's management tool (``npu-smi``, ``hy-smi``, ``cnmon``, ``xpu-smi``).

Discovery talks to the hardware through a ``ToolRunner`` so that tests hand it a fake
that prints a recorded output (hardware behind a small protocol).
"""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from typing import Protocol

import attrs

from hami_core.protocol.config import VendorConfig

log = logging.getLogger(__name__)

#: How long a tool may run before discovery gives up on it, seconds.
DEFAULT_TOOL_TIMEOUT_S = 30.0


class ToolRunner(Protocol):
    """Runs a management tool: ``argv`` -> its standard output, or None when the tool is
    missing, fails or runs past its timeout."""

    def __call__(self, argv: Sequence[str]) -> str | None: ...


def run_tool(argv: Sequence[str], *, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S) -> str | None:
    """Run ``argv`` and return its standard output (text).

    Returns None, logging why, when the executable is not found (no driver on this
    node: debug), cannot start, runs longer than ``timeout_s`` seconds (killed) or exits
    non-zero (a warning with its standard error). Never raises.
    """
    if not argv or shutil.which(argv[0]) is None:
        log.debug("%s: not found", argv[0] if argv else "(empty command)")
        return None
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        log.warning("%s: no answer within %.0f s", " ".join(argv), timeout_s)
        return None
    except OSError as exc:
        log.warning("%s: %s", argv[0], exc)
        return None
    if proc.returncode != 0:
        log.warning("%s exited %d: %s", " ".join(argv), proc.returncode, proc.stderr.strip())
        return None
    return proc.stdout


@attrs.frozen
class SubprocessRunner:
    """The real ``ToolRunner``: ``run_tool`` with a timeout in seconds."""

    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S

    def __call__(self, argv: Sequence[str]) -> str | None:
        return run_tool(argv, timeout_s=self.timeout_s)


def configured_tool_output(
    config: VendorConfig, *, command_key: str, timeout_key: str, runner: ToolRunner | None = None
) -> str | None:
    """Run the tool a backend's section names and return its output (or None, as
    ``run_tool``).

    Args:
        command_key: the option holding the command line (``"cnmon info"``; split as a
            shell would, without running a shell).
        timeout_key: the option holding its timeout, seconds.
        runner: a fake for tests; default: ``SubprocessRunner`` with that timeout.
    """
    argv = shlex.split(str(config.options[command_key]))
    real = runner or SubprocessRunner(timeout_s=float(config.options[timeout_key]))
    return real(argv)


@attrs.frozen(kw_only=True)
class ConfiguredTool:
    """A management tool whose command line and timeout are options of the backend's
    section (Cambricon's ``cnmonCommand`` / ``cnmonTimeoutSeconds``), stated once.

    Attributes:
        command_key: the option holding the command line (split as a shell would,
            without running a shell).
        timeout_key: the option holding its timeout, seconds.
    """

    command_key: str
    timeout_key: str

    def output(self, config: VendorConfig, runner: ToolRunner | None = None) -> str | None:
        """The tool's stdout, or None when it is missing, fails or times out
        (``configured_tool_output``; ``runner``: a fake for tests)."""
        return configured_tool_output(
            config, command_key=self.command_key, timeout_key=self.timeout_key, runner=runner
        )
