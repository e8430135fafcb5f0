"""A pytest plugin recording which test exercised which hook of which backend.

``pytest -p tests.hookrecord`` with ``HAMI_HOOK_RECORD=<file>`` wraps every ``hami_*``
hook implementation of every installed backend (before any test module or manager sees
them) and, at the end, writes ``{"<backend>.<hook>": ["<test id>", ...]}`` to the file:
the tests that passed and, while running, called that hook and got an answer back (a
value, not None; for ``hami_release`` and ``hami_watch_health``, whose answer is the
side effect or the stream, a return without an exception; for ``hami_check_config``,
settings or the ``ConfigError`` it raised). Read by
``tests/unit/test_hookspecs.py``.
"""

from __future__ import annotations

import inspect
import json
import os
from collections import defaultdict
from importlib.metadata import entry_points
from typing import Any

import pytest

from hami_core.errors import ConfigError
from hami_core.plugin.manager import ENTRY_POINT_GROUP

ENV = "HAMI_HOOK_RECORD"
#: Hooks answered by what they do, not by a value.
EFFECT_HOOKS = frozenset({"hami_release", "hami_watch_health", "hami_prepare_node"})

_current: list[str] = []
_seen: dict[str, set[str]] = defaultdict(set)
_passed: set[str] = set()


def _wrap(backend: str, name: str, fn: Any) -> Any:
    key = f"{backend}.{name}"

    def call(kwargs: dict[str, Any]) -> Any:
        try:
            value = fn(**kwargs)
        except ConfigError:
            # a check's answer to a bad section is the error (the test expected it)
            if _current and name == "hami_check_config":
                _seen[key].add(_current[-1])
            raise
        if _current and (value is not None or name in EFFECT_HOOKS):
            _seen[key].add(_current[-1])
        return value

    # pluggy passes a hook the arguments its positional parameters without a default
    # name (a vendor function registered as is may have more: a keyword-only clock):
    # keep those names
    params = [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty
    ]
    scope: dict[str, Any] = {"call": call}
    body = ", ".join(f"{p!r}: {p}" for p in params)
    exec(f"def {name}({', '.join(params)}):\n    return call({{{body}}})", scope)
    wrapper = scope[name]
    wrapper.__dict__.update(fn.__dict__)  # the hookimpl marker and its options
    wrapper.__doc__ = fn.__doc__
    return wrapper


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get(ENV):
        return
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        module = ep.load()
        for name, fn in list(vars(module).items()):
            if name.startswith("hami_") and callable(fn) and hasattr(fn, "hami_impl"):
                setattr(module, name, _wrap(ep.name, name, fn))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Any:
    # setup too: a fixture that builds the cluster reads the nodes through the hooks
    _current.append(item.nodeid)
    try:
        yield
    finally:
        _current.pop()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        _passed.add(report.nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    out = {key: sorted(ids & _passed) for key, ids in sorted(_seen.items())}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(out, fh, indent=1)
