"""Optional parts of hami-core and the extras that install them.

``pip install hami-core`` gives the model, hooks, manager, protocol, scheduling engine,
``hami simulate`` and the CLI. The servers (``hami scheduler``, ``hami webhook``,
``hami device-plugin``) need ``hami-core[server]``; the conformance kit
(``hami_core.testing``) needs ``hami-core[testing]``. The modules each extra brings are
listed here once, so a missing one is reported with the extra to install instead of a
bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Final

from hami_core.errors import HamiError

#: Importable top-level modules each extra of pyproject.toml installs (the distributions
#: kubernetes, flask (with werkzeug), waitress, cheroot, grpcio, protobuf,
#: prometheus-client, cryptography; and pytest).
EXTRA_MODULES: Final[dict[str, tuple[str, ...]]] = {
    "server": (
        "kubernetes",
        "flask",
        "werkzeug",
        "waitress",
        "cheroot",
        "grpc",
        "google.protobuf",
        "prometheus_client",
        "cryptography",
    ),
    "testing": ("pytest",),
}


class MissingExtraError(HamiError, ImportError):
    """A command or module needs an extra of hami-core that is not installed.

    Attributes:
        extra: the extra's name (``"server"``), installed by ``pip install
            'hami-core[server]'``.
        missing: the modules that are not importable.
    """

    def __init__(self, what: str, extra: str, missing: list[str]) -> None:
        super().__init__(
            f"{what} needs hami-core[{extra}] (not installed: {', '.join(missing)}); "
            f"install it with: pip install 'hami-core[{extra}]'"
        )
        self.extra = extra
        self.missing = missing


def missing_modules(extra: str) -> list[str]:
    """Modules of ``extra`` (a key of ``EXTRA_MODULES``) that cannot be imported."""
    missing = []
    for name in EXTRA_MODULES[extra]:
        if name in sys.modules:
            found = sys.modules[name] is not None  # None: imports of it are blocked
        else:
            try:
                found = importlib.util.find_spec(name) is not None
            except (ImportError, ValueError):  # a dotted name's parent is absent or blocked
                found = False
        if not found:
            missing.append(name)
    return missing


def require_extra(extra: str, what: str) -> None:
    """Check that every module of ``extra`` is importable, before ``what`` starts.

    Args:
        extra: ``"server"`` or ``"testing"``.
        what: what needs it, for the message (``"hami scheduler"``).

    Raises:
        MissingExtraError: one line naming the extra and the missing modules.
    """
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(what, extra, missing)


def extra_of_module(name: str | None) -> str | None:
    """The extra that installs module ``name`` (e.g. ``"flask.json"``), or None."""
    if not name:
        return None
    for extra, modules in EXTRA_MODULES.items():
        for module in modules:
            if name == module or name.startswith(module + ".") or module.startswith(name + "."):
                return extra
    return None
