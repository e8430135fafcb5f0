"""Fixtures of the node monitor tests: the real shim (libvgpu.so and the stand-in
driver of shim/tests/stubs, built once) writes the region files the monitor reads."""

from __future__ import annotations

from tests.shim.conftest import build, region_reader, shim  # noqa: F401  (fixtures)
