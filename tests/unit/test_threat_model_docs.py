"""Issue #12 item 5: the threat model is written down where users read (README and
docs/SHIM.md), naming what bypasses the cooperative limiter and what isolates."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_and_shim_doc_state_the_threat_model():
    for doc in (ROOT / "README.md", ROOT / "docs" / "SHIM.md"):
        text = " ".join(doc.read_text(encoding="utf-8").split())
        assert "cooperative" in text, doc
        for bypass in (
            "statically linked" if doc.name == "README.md" else "link statically",
            "dlmopen",
            "own loader",
        ):
            assert bypass in text, (doc, bypass)
        assert "only MIG instances" in text and "whole GPUs isolate a hostile tenant" in text, doc
