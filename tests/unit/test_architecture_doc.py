"""docs/architecture.md is the map of the repository: it must name every room there is.

The rooms are read from the code and the import-linter contracts, never listed here, so a
package, a top-level module, a layer or a contract added anywhere fails this test until
the map says what it holds. The door plates (each package's ``__init__`` docstring) and
the repository's pointers to its own documents are checked here too.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
CORE = ROOT / "hami_core"


def importlinter() -> dict[str, object]:
    """The ``[tool.importlinter]`` table of pyproject.toml."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return dict(data["tool"]["importlinter"])


def contracts() -> list[dict[str, object]]:
    """The import-linter contracts of pyproject.toml."""
    found = importlinter()["contracts"]
    assert isinstance(found, list) and found, "pyproject.toml declares no import-linter contract"
    return list(found)


def root_packages() -> set[str]:
    """Our packages in the import graph: ``hami_core`` and the backends it holds."""
    roots = importlinter().get("root_packages") or [importlinter().get("root_package")]
    assert isinstance(roots, list)
    return {str(r) for r in roots}


def contract_modules() -> set[str]:
    """Every module of ours (under a root package) a contract names: sources, forbidden
    ones, layers (a layer ``a | b`` names both), whatever the contract's type calls the
    field."""
    names: set[str] = set()
    ours = root_packages()

    def walk(value: object) -> None:
        if isinstance(value, str):
            for part in value.split("|"):
                part = part.strip().removeprefix("(").removesuffix(")").strip()
                if part.split(".")[0] in ours:
                    names.add(part)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    for contract in contracts():
        walk({k: v for k, v in contract.items() if k != "name"})
    return names


def core_packages() -> list[str]:
    """``hami_core`` and every package under it, dotted, generated ones included."""
    return sorted(".".join(p.parent.relative_to(ROOT).parts) for p in CORE.rglob("__init__.py"))


def core_modules() -> list[str]:
    """The top-level modules of ``hami_core`` (``cli``, ``settings``, ...)."""
    return sorted(f"hami_core.{p.stem}" for p in CORE.glob("*.py") if not p.name.startswith("__"))


def doc_text() -> str:
    assert DOC.is_file(), "docs/architecture.md is missing: the repository has no map"
    return DOC.read_text(encoding="utf-8")


def named(text: str, module: str) -> bool:
    """``module`` written whole in ``text`` (``hami_core.top``, not ``hami_core.topology``)."""
    return re.search(rf"(?<![\w.]){re.escape(module)}(?![\w])", text) is not None


def test_the_contracts_and_the_packages_are_read():
    # The lists below come from the files; a reader that found nothing would pass
    # every check vacuously.
    assert "hami_core.scheduling" in contract_modules()
    assert "hami_core.model" in contract_modules()
    assert "hami_core.servers.kubelet" in core_packages()
    assert "hami_core.cli" in core_modules()


def test_every_package_of_the_core_is_on_the_map():
    text = doc_text()
    missing = [p for p in core_packages() if not named(text, p)]
    assert not missing, f"docs/architecture.md does not say what these packages hold: {missing}"


def test_every_top_level_module_of_the_core_is_on_the_map():
    text = doc_text()
    missing = [m for m in core_modules() if not named(text, m)]
    assert not missing, f"docs/architecture.md does not say what these modules hold: {missing}"


def test_every_module_and_layer_of_the_import_contracts_is_on_the_map():
    text = doc_text()
    missing = sorted(m for m in contract_modules() if not named(text, m))
    assert not missing, (
        f"docs/architecture.md does not place these modules of the import-linter contracts: "
        f"{missing}"
    )


def test_every_import_contract_is_stated_on_the_map():
    text = doc_text()
    missing = [str(c["name"]) for c in contracts() if str(c["name"]) not in text]
    assert not missing, (
        f"docs/architecture.md does not state these import-linter contracts "
        f"(quote each name as pyproject.toml writes it): {missing}"
    )


def test_the_map_names_files_that_exist():
    # A map pointing at a file the refactor removed is a false claim.
    text = doc_text()
    paths = set(
        re.findall(r"`((?:hami_core|backends|shim|docs|tests|charts|scripts)/[\w./-]+?)`", text)
    )
    assert paths, "the map names no file"
    missing = sorted(p for p in paths if not (ROOT / p.split("::")[0]).exists())
    assert not missing, f"docs/architecture.md names files the repository lacks: {missing}"


def test_the_map_names_functions_that_exist():
    # `path.py:Name` or `path.py:Class.method`: the trip names where each step is.
    text = doc_text()
    refs = re.findall(r"`((?:hami_core|backends)/[\w./-]+\.py):([\w.]+)`", text)
    assert refs, "the map names no function"
    missing = []
    for path, dotted in refs:
        file = ROOT / path
        if not file.is_file():
            missing.append(f"{path}:{dotted}")
            continue
        scope: list[ast.stmt] = ast.parse(file.read_text(encoding="utf-8")).body
        for part in dotted.split("."):
            found = [
                n
                for n in scope
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.name == part
            ]
            if not found:
                missing.append(f"{path}:{dotted}")
                break
            node = found[0]
            scope = node.body if isinstance(node, ast.ClassDef) else []
    assert not missing, f"docs/architecture.md names functions the code lacks: {missing}"


def _plates() -> list[str]:
    """Every package's ``__init__.py``: the core's, the backends', the example's."""
    inits = [str(Path(*p.split(".")) / "__init__.py") for p in core_packages()]
    inits += sorted(
        str(p.relative_to(ROOT))
        for p in [
            *ROOT.glob("backends/*/hami_*/**/__init__.py"),
            *ROOT.glob("examples/*/*/__init__.py"),
        ]
    )
    return inits


@pytest.mark.parametrize("package", _plates())
def test_every_package_says_what_it_holds(package):
    init = ROOT / package
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    assert len(doc.split()) >= 8, f"{package}/__init__.py does not say what the package holds"
    assert not re.fullmatch(r"\s*See [\w./-]+\.?\s*", doc), f"{package}: a pointer, not a plate"


def _our_texts() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += sorted((ROOT / "shim").glob("*.md"))
    files += sorted(CORE.rglob("*.py"))
    files += sorted((ROOT / "charts").rglob("*.yaml"))
    return files


def test_no_document_points_to_a_file_the_repository_lacks():
    # "See DESIGN.md." stood on two door plates and in docs/hami-go-tests.md for a file
    # that never existed; docs/metrics.md was named for docs/monitoring.md.
    bad = []
    for file in _our_texts():
        text = file.read_text(encoding="utf-8")
        rel = file.relative_to(ROOT)
        if "DESIGN.md" in text:
            bad.append(f"{rel}: DESIGN.md")
        for doc in re.findall(r"(?<![\w/.])docs/([\w-]+\.md)", text):
            if not (ROOT / "docs" / doc).is_file():
                bad.append(f"{rel}: docs/{doc}")
        if file.suffix == ".md":
            for link in re.findall(r"\]\(([^)#\s]+)", text) + re.findall(r"`(\.\./[^`]+)`", text):
                if "://" not in link and not (file.parent / link).exists():
                    bad.append(f"{rel}: {link}")
    assert not bad, f"pointers to files the repository does not have: {bad}"


def _doc_pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    pages += sorted((ROOT / "shim").glob("*.md"))
    pages += [*sorted(ROOT.glob("backends/*/README.md")), ROOT / "examples" / "README.md"]
    return pages


def test_no_document_names_a_source_file_the_repository_lacks():
    # A refactor that moves a module (scheduling/usage.py to facts/) leaves every page
    # naming the old path false; a path is read from the repository root or the page's
    # own folder (shim/README.md names tests/stubs/ under shim/).
    pattern = re.compile(
        r"(?<![\w/.])((?:hami_core|backends/[\w-]+/hami_\w+|shim|scripts|charts/hami|tests)"
        r"/[\w./-]+\.(?:py|md|c|h|yaml|json|sh))"
    )
    missing = []
    for page in _doc_pages():
        for path in set(pattern.findall(page.read_text(encoding="utf-8"))):
            if not (ROOT / path).exists() and not (page.parent / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, f"pages name files the repository lacks: {sorted(missing)}"


#: Imported from anywhere below the servers; a row of the rooms table may leave them out.
_ANYWHERE = {"errors", "extras", "settings"}


def _imports_by_room() -> dict[str, set[str]]:
    """What each room of ``hami_core`` imports of the others, from the import graph."""
    import grimp  # import-linter's graph builder, installed with it

    graph = grimp.build_graph("hami_core")
    out: dict[str, set[str]] = {}
    for module in graph.modules:
        room = ".".join(module.split(".")[:2])
        for imported in graph.find_modules_directly_imported_by(module):
            other = ".".join(imported.split(".")[:2])
            if other != room and other.startswith("hami_core."):
                out.setdefault(room, set()).add(other.removeprefix("hami_core."))
    return out


def test_the_imports_column_of_the_rooms_table_is_the_import_graph():
    text = doc_text()
    rows = re.findall(r"^\| `(hami_core(?:\.\w+)?)` \|[^\n]*\| ([^|\n]*) \|$", text, re.M)
    assert len(rows) >= 15, "the rooms table was not found"
    graph = _imports_by_room()
    wrong = []
    for room, cell in rows:
        stated = set()
        for item in cell.split(","):
            word = item.strip().split(" ")[0].strip("`")
            if word and word != "—":
                stated.add(word)
        actual = graph.get(room, set())
        if stated - _ANYWHERE != actual - _ANYWHERE:
            wrong.append(f"{room}: the map says {sorted(stated)}, the code {sorted(actual)}")
    assert not wrong, "docs/architecture.md's imports column is not the code's:\n" + "\n".join(
        wrong
    )
