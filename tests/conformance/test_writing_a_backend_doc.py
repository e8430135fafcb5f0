"""``docs/writing-a-backend.md`` shows the tested code, not a copy that can drift.

Every line of its Python blocks is a line of the example backend
(``examples/backend-example``), of its test (``test_example_backend.py``, which runs the
conformance kit on it) or of ``tests/conftest.py``; its imports of the core import; the
two blocks that show what the example does not need (``hami_fit_nodes``, a
``NodeState``) are run here and their answers checked; the TOML block is the example's
``pyproject.toml``. The example itself passes the kit, and the kit reaches (with an
answer) every hook the example implements.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path

import pytest

from hami_core.backend import ContainerAllocation, hookimpl
from hami_core.model import DevicePolicy, DeviceRequest, DeviceUsage, NodeInfo, NodePolicy
from hami_core.model.nodestate import MemoryNodeState
from hami_core.plugin import BackendManager
from hami_core.testing import BackendConformance

from .test_example_backend import EXAMPLE, example_device, example_plugin

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "writing-a-backend.md"
TESTED = [
    *sorted((EXAMPLE / "hami_example").glob("*.py")),
    Path(__file__).with_name("test_example_backend.py"),
    ROOT / "tests" / "conftest.py",
]
#: Blocks run here rather than found in the example: (a line that marks the block).
RUN_HERE = (
    "def hami_fit_nodes(",
    "def hami_allocate(pod, container, devices, node_devices, state)",
)


def blocks(language: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return [m.group(1) for m in re.finditer(rf"```{language}\n(.*?)```", text, re.S)]


def code_lines(block: str) -> list[str]:
    """The block's lines without blank lines, comment lines and trailing comments."""
    out = []
    for line in textwrap.dedent(block).splitlines():
        code = line.split("  #", 1)[0].strip()
        if code and not code.startswith("#"):
            out.append(code)
    return out


def lines_of_tested_files() -> set[str]:
    return {line.strip() for path in TESTED for line in path.read_text("utf-8").splitlines()}


def test_the_doc_has_the_blocks_this_test_reads():
    python = blocks("python")
    assert len(python) >= 5
    for marker in RUN_HERE:
        assert sum(marker in b for b in python) == 1, marker


@pytest.mark.parametrize(
    "index",
    [i for i, b in enumerate(blocks("python")) if not any(m in b for m in RUN_HERE)],
)
def test_every_python_line_of_the_doc_is_tested_code(index):
    block = blocks("python")[index]
    known = lines_of_tested_files()
    for line in code_lines(block):
        if line.startswith(("from hami_core", "import hami_core")):
            exec(line, {})  # the kit still exports what the doc imports
        else:
            assert line in known, f"docs/writing-a-backend.md: {line!r} is in no tested file"


def test_the_toml_block_is_the_examples_pyproject():
    (block,) = blocks("toml")
    pyproject = {
        line.strip()
        for line in (EXAMPLE / "pyproject.toml").read_text("utf-8").splitlines()
        if line.strip()
    }
    for line in code_lines(block):
        # the doc writes the one-line dependency list; the file spells it out
        assert line in pyproject or line == 'dependencies = ["hami-core>=0.1,<0.2"]', line
    assert '"hami-core>=0.1,<0.2",' in pyproject


def _run_block(marker: str, scope: dict[str, object]) -> dict[str, object]:
    (block,) = [b for b in blocks("python") if marker in b]
    exec(compile(textwrap.dedent(block), str(DOC), "exec"), scope)
    return scope


def test_the_node_state_block_keeps_slots_disjoint_and_stable():
    scope = _run_block(
        RUN_HERE[1], {"hookimpl": hookimpl, "ContainerAllocation": ContainerAllocation}
    )
    allocate = scope["hami_allocate"]
    state = MemoryNodeState()
    pod = {"metadata": {"uid": "u1"}}

    def slot(container: str) -> str:
        answer = allocate(pod, {"name": container}, (), (), state)
        assert isinstance(answer, ContainerAllocation)
        return answer.envs["MY_SLOT"]

    assert (slot("a"), slot("b"), slot("a")) == ("0", "1", "0")
    assert state.read("slots") == {"u1/a": 0, "u1/b": 1}


def test_the_batch_fit_block_answers_as_fit_per_node():
    fit = example_plugin.FIT
    scope = _run_block(RUN_HERE[0], {"hookimpl": hookimpl, "FIT": fit})
    devices = [example_device("EX-0"), example_device("EX-1", 1)]
    usage = [DeviceUsage(device=d) for d in devices]
    small = [DeviceUsage(device=example_device("EX-9"), used_memory_mib=8000)]
    nodes = [(NodeInfo(name="a"), usage, ()), (NodeInfo(name="b"), small, ())]
    request = DeviceRequest(vendor="EXAMPLE", count=1, memory_mib=1024)
    pod = {"metadata": {"name": "p", "namespace": "default"}}
    batch = scope["hami_fit_nodes"](request, nodes, pod, DevicePolicy.SPREAD)
    alone = [fit(request, n, u, pod, DevicePolicy.SPREAD) for n, u, _ in nodes]
    assert batch == alone
    assert [r.fits for r in batch] == [True, False]


class Recording:
    """The example's plugin module, recording each hook that answered."""

    def __init__(self, plugin: object) -> None:
        self.answered: set[str] = set()
        self.implemented = {n for n in dir(plugin) if n.startswith("hami_")}
        for name in self.implemented:
            setattr(self, name, self._wrap(name, getattr(plugin, name)))

    def _wrap(self, name, fn):  # type: ignore[no-untyped-def]
        def call(kwargs):  # type: ignore[no-untyped-def]
            value = fn(**kwargs)
            if value is not None:
                self.answered.add(name)
            return value

        params = list(inspect.signature(fn).parameters)
        body = ", ".join(f"{p!r}: {p}" for p in params)
        scope: dict[str, object] = {"call": call}
        exec(f"def {name}({', '.join(params)}):\n    return call({{{body}}})", scope)
        return hookimpl(scope[name])


def test_the_kit_reaches_every_hook_the_example_implements():
    """Every test of the kit, run on the example: each hook the example implements
    (but ``hami_discover``, which has no driver to ask) answered at least once."""
    recording = Recording(example_plugin)

    class Kit(BackendConformance):
        backend_name = "example"
        plugin = recording

    manager = BackendManager.from_plugins({"example": recording})
    kit = Kit()
    ran = 0
    for name in dir(kit):
        if not name.startswith("test_"):
            continue
        method = getattr(kit, name)
        params = inspect.signature(method).parameters
        try:
            if "policy" in params:
                options = list(DevicePolicy) if "fit" in name else list(NodePolicy)
                for policy in options:
                    method(manager=manager, policy=policy)
            else:
                method(manager=manager)
            ran += 1
        except pytest.skip.Exception:
            continue
    assert ran >= 10
    assert recording.implemented - {"hami_discover"} <= recording.answered
