"""SHIM.md lesson 1: exact symbol resolution. The driver reached the way the CUDA
runtime, PyTorch and ctypes reach it (dlopen + dlsym, cuGetProcAddress with version
and flags) is the limited one; only matching entry points are swapped; dlsym keeps
its semantics for everything else."""

from __future__ import annotations

import pytest

from .support import OOM

# "thunks": the driver's resolver hands out internal addresses, not its exported
# symbols (STUB_PROCADDR_THUNKS); the library must recognize them all the same.
RESOLVERS = {"exported": {}, "thunks": {"STUB_PROCADDR_THUNKS": "1"}}


@pytest.mark.parametrize("resolver", RESOLVERS)
@pytest.mark.parametrize("via", ["dlsym", "procaddr", "procaddr-ptds"])
def test_runtime_style_lookups_are_limited(shim, via, resolver):
    """dlopen("libcuda.so.1") + dlsym(handle, ...) / cuGetProcAddress_v2: a lookup
    on the driver's own handle never sees a preloaded library, yet the limit holds."""
    r = shim.probe(
        "init",
        "ctx",
        "0",
        "alloc",
        "1024m",
        "alloc",
        "1",
        "meminfo",
        via=via,
        **RESOLVERS[resolver],
    )
    assert r.rcs("alloc") == [0, OOM]
    assert r.op("meminfo")["total"] == 1024 << 20


@pytest.mark.parametrize(
    ("name", "version", "flags", "expect", "hooked"),
    [
        # The current variant is swapped for its hook...
        ("cuMemAlloc", 12080, 0, "cuMemAlloc_v2", True),
        ("cuMemGetInfo", 12080, 0, "cuMemGetInfo_v2", True),
        ("cuLaunchKernel", 12080, 0, "cuLaunchKernel", True),
        # ...the per-thread-stream variant for its own hook (flags = PER_THREAD)...
        ("cuLaunchKernel", 12080, 2, "cuLaunchKernel_ptsz", True),
        ("cuMemAllocAsync", 12080, 2, "cuMemAllocAsync_ptsz", True),
        ("cuGetProcAddress", 12080, 0, "cuGetProcAddress_v2", True),
        ("cuGetProcAddress", 11080, 0, "cuGetProcAddress", True),
        # ...an older variant of another signature is left alone (no hook matches it)...
        ("cuMemAlloc", 3000, 0, "cuMemAlloc", False),
        ("cuDeviceTotalMem", 3000, 0, "cuDeviceTotalMem", False),
        # ...and so is everything not on the list.
        ("cuCtxSynchronize", 12080, 0, "cuCtxSynchronize", False),
    ],
)
@pytest.mark.parametrize("resolver", RESOLVERS)
def test_get_proc_address_swaps_exactly(shim, name, version, flags, expect, hooked, resolver):
    r = shim.probe(
        "init", "procaddr", name, str(version), str(flags), expect, **RESOLVERS[resolver]
    )
    res = r.op("procaddr")
    assert (res["rc"], res["status"]) == (0, 0)
    if hooked:
        # What the library exports under `expect` (its hook), not the driver's.
        assert res["is_global"] == 1 and res["is_driver"] == 0, res
    elif resolver == "exported":
        assert res["is_driver"] == 1, res
    else:
        assert res["is_global"] == 0 or res["is_driver"] == 1, res


def test_a_newer_variant_of_another_signature_is_not_swapped(shim):
    """A future cuMemGetInfo variant (different signature) is not the hooked _v2:
    the library must hand it out untouched rather than its _v2 hook."""
    res = shim.probe("init", "procaddr", "cuMemGetInfo", "99000", "0", "cuMemGetInfo_v2").op(
        "procaddr"
    )
    assert (res["rc"], res["null"]) == (0, 0)
    assert (res["is_global"], res["is_driver"]) == (0, 0), res


def test_get_proc_address_keeps_the_drivers_answer_on_failure(shim):
    """cuMemAllocAsync exists from CUDA 11.2: asking with 11.0 fails as the driver says."""
    res = shim.probe("init", "procaddr", "cuMemAllocAsync", "11000", "0", "cuMemAllocAsync").op(
        "procaddr"
    )
    assert (res["rc"], res["status"], res["null"]) == (500, 2, 1)


def test_per_thread_entry_points_run_the_hooks(shim):
    """A runtime built for per-thread default streams fetches the _ptsz variants: the
    ones it gets are the hooks, which call the driver's _ptsz functions."""
    r = shim.probe(
        "init",
        "ctx",
        "0",
        "alloc",
        "1000m",
        "async",
        "24m",
        "last",
        "async",
        "1",
        via="procaddr-ptds",
    )
    assert r.rcs("alloc") + r.rcs("async") == [0, 0, OOM]
    assert r.op("last")["name"] == "cuMemAllocAsync_ptsz"


def test_rtld_next_and_default_keep_their_meaning(shim):
    """An interposed dlsym must not change who "the caller" is: dlsym(RTLD_NEXT)
    from a library still finds the next definition after that library."""
    plain = shim.run("rtld_next", env=shim.env(LD_PRELOAD=None)).stdout
    under = shim.run("rtld_next").stdout
    assert plain == under
    assert '"from_lib_next":2' in under and '"default":1' in under
