"""``hami nvidia ...`` commands (registered in the ``hami.commands`` entry-point group)."""

from __future__ import annotations

import click

from .shim import library_path


@click.group("nvidia")
def nvidia() -> None:
    """NVIDIA backend tools."""


@nvidia.command("shim-path")
def shim_path() -> None:
    """Print the path of the installed libvgpu.so."""
    click.echo(str(library_path()))
