"""No backend's modules import each other in a cycle (function-level imports included:
one that defers an import to break a cycle at load time still ties the two modules
into one). Read with grimp, import-linter's graph builder."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = sorted(
    p.name for p in ROOT.glob("backends/hami-*/hami_*") if (p / "__init__.py").is_file()
)


@pytest.mark.parametrize("package", BACKENDS)
def test_no_import_cycle_in_a_backend(package: str) -> None:
    graph = grimp.build_graph(package, cache_dir=None)
    cycles = []
    for module in sorted(graph.modules):
        if module == package:
            continue  # the package's __init__ may re-export its modules
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported in (module, package) or not imported.startswith(f"{package}."):
                continue
            chain = graph.find_shortest_chain(importer=imported, imported=module)
            if chain:
                cycles.append(f"{module} -> {' -> '.join(chain)}")
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
