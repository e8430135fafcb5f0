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


def test_the_enforcement_boundary_names_every_mechanism_and_only_real_metrics_and_flags():
    """Issue #24 item 20: where enforcement stops against code in the container, and
    what the host-side measure catches; every metric, flag and annotation the section
    names exists in the code, so the page cannot drift from what runs."""
    import re

    doc = (ROOT / "docs" / "threat-model.md").read_text(encoding="utf-8")
    start = doc.index("## The enforcement boundary")
    section = doc[start : doc.index("\n## ", start + 1)]
    for mechanism in (
        "`libvgpu.so`",
        "shared region",
        "MPS, `mpsIsolation: per-container`",
        "MPS, `mpsIsolation: shared`",
        "MIG",
        "whole GPUs",
        "accounting",
    ):
        assert mechanism in section, mechanism
    for bypass in ("LD_PRELOAD", "static linking", "dlmopen", "ioctl", "CUDA_MPS_PIPE_DIRECTORY"):
        assert bypass in section, bypass
    code = "\n".join(
        p.read_text(encoding="utf-8")
        for base in ("hami_core", "backends")
        for p in (ROOT / base).rglob("*.py")
    )
    named = set(re.findall(r"`((?:hami_)[a-z_]+)`", section))
    named |= set(re.findall(r"`(--[a-z-]+)`", section))
    named |= {"hami.io/overuse-policy", "GPUMemoryOverAllocation"}
    assert {"hami_container_device_memory_over_allocation_bytes", "--scan-interval"} <= named
    for name in named:
        assert name.lstrip("-").replace("-", "_") in code or name in code, name
