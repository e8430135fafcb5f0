"""Every hook is documented (who calls it, what it returns); every installed backend runs
the conformance kit, and the kit really drives the hooks it claims to check."""

import importlib
import inspect
from pathlib import Path

import pytest

from hami_core.model import DevicePolicy, NodePolicy
from hami_core.plugin import BackendManager, hookimpl, hookspecs
from hami_core.testing import BackendConformance
from tests.toy_backend import ToyBackend

HOOKS = [
    name
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
    if name.startswith("hami_")
]
TESTS = Path(__file__).resolve().parents[1]


def test_the_five_hooks_of_the_product_card_exist():
    assert {"hami_discover", "hami_fit", "hami_score", "hami_allocate", "hami_mutate"} <= set(HOOKS)


@pytest.mark.parametrize("name", HOOKS)
def test_hook_is_documented(name):
    doc = inspect.getdoc(getattr(hookspecs, name)) or ""
    assert "Called by" in doc, f"{name}: say who calls it and when"
    assert "Returns" in doc, f"{name}: say what it returns (with units)"


#: What the conformance kit drives, with asserted results, for every backend that runs it.
KIT_HOOKS = {
    "hami_backend_info",
    "hami_check_config",
    "hami_parse_request",
    "hami_mutate",
    "hami_fit",
    "hami_fit_nodes",
    "hami_score",
    "hami_allocate",
}


def _conformance_classes() -> list[type]:
    """Every ``BackendConformance`` subclass of the test suite (imported to find them)."""
    for path in sorted(TESTS.rglob("test_*.py")):
        if "BackendConformance)" in path.read_text(encoding="utf-8"):
            rel = path.relative_to(TESTS.parent).with_suffix("")
            importlib.import_module(".".join(rel.parts))
    out, todo = [], list(BackendConformance.__subclasses__())
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def test_every_installed_backend_runs_the_conformance_kit():
    installed = {r.name for r in BackendManager.from_entry_points(disabled=[]).backends}
    covered = {cls.backend_name for cls in _conformance_classes()}
    assert installed <= covered, f"no conformance test class for {sorted(installed - covered)}"


class Recording:
    """The toy backend, recording each hook the kit calls and whether it answered."""

    def __init__(self) -> None:
        self.answered: set[str] = set()
        self.inner = ToyBackend()
        for name in dir(self.inner):
            if name.startswith("hami_"):
                setattr(self, name, self._wrap(name, getattr(self.inner, name)))

    def _wrap(self, name, fn):  # type: ignore[no-untyped-def]
        def call(**kwargs):  # type: ignore[no-untyped-def]
            value = fn(**kwargs)
            if value is not None:
                self.answered.add(name)
            return value

        # pluggy passes a hook the arguments its parameters name: keep the names
        args = ", ".join(inspect.signature(fn).parameters)
        keywords = ", ".join(f"{a}={a}" for a in inspect.signature(fn).parameters)
        scope: dict[str, object] = {"call": call}
        exec(f"def {name}({args}):\n    return call({keywords})", scope)
        return hookimpl(scope[name])


def test_the_kit_drives_every_kit_hook_a_backend_implements():
    """Run every test of the kit against a recording backend: each of its hooks in
    ``KIT_HOOKS`` must have been called and have answered (so the kit's assertions saw
    a real result, not a skipped call)."""
    recording = Recording()

    class Kit(BackendConformance):
        backend_name = "toy"
        plugin = recording

    manager = BackendManager.from_plugins({"toy": recording})
    kit = Kit()
    for name in dir(kit):
        if not name.startswith("test_"):
            continue
        method = getattr(kit, name)
        params = inspect.signature(method).parameters
        if "policy" in params:
            options = list(DevicePolicy) if "fit" in name else list(NodePolicy)
            for policy in options:
                method(manager=manager, policy=policy)
        else:
            method(manager=manager)
    implemented = {n for n in dir(recording.inner) if n.startswith("hami_")}
    assert (KIT_HOOKS & implemented) - {"hami_check_config"} <= recording.answered
