"""``python -m hami_core`` runs the ``hami`` command."""

from hami_core.cli import main

main()
