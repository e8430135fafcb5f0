"""The ``hami`` command."""

from __future__ import annotations

import json
import sys

import click

from hami_core import __version__
from hami_core.errors import HamiError
from hami_core.plugin import BackendManager


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """hami: GPU sharing for Kubernetes (HAMi-compatible)."""


@cli.command()
def version() -> None:
    """Print the version of hami-core."""
    click.echo(f"hami-core {__version__}")


@cli.command()
@click.option(
    "--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def backends(output: str) -> None:
    """List installed backends, their versions, vendor keys and implemented hooks.

    Backends are found through the ``hami.backends`` entry-point group; names listed in
    HAMI_DISABLED_BACKENDS (comma-separated) are skipped.
    """
    manager = BackendManager.from_entry_points()
    rows = [
        {
            "name": r.name,
            "version": r.version,
            "vendors": list(r.info.vendors),
            "hooks": list(r.hooks),
            "description": r.info.description,
        }
        for r in manager.backends
    ]
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no backends installed (or all disabled by HAMI_DISABLED_BACKENDS)")
        return
    for row in rows:
        click.echo(f"{row['name']} {row['version']}  vendors: {', '.join(row['vendors'])}")
        click.echo(f"  hooks: {', '.join(row['hooks'])}")


def main() -> None:
    """Entry point: run the CLI, turning hami errors into a one-line message, exit 2."""
    try:
        cli(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except HamiError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
