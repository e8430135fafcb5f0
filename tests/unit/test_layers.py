"""The core never imports a vendor package (import-linter checks the other layers)."""

import ast
from pathlib import Path

import hami_core

CORE = Path(hami_core.__file__).parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def test_core_never_imports_a_vendor_package():
    offenders = {
        (str(path.relative_to(CORE)), mod)
        for path in CORE.rglob("*.py")
        for mod in imported_modules(path)
        if mod.split(".")[0].startswith("hami_") and mod.split(".")[0] != "hami_core"
    }
    assert offenders == set()


def test_the_scan_sees_imports(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text("import hami_nvidia.fit\nfrom hami_ascend import plugin\n")
    assert imported_modules(sample) == {"hami_nvidia.fit", "hami_ascend"}
