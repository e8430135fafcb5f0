"""The address the chart e2e tests put on lo for the API server (``kubenode.
claim_lo_address``) is claimed per run: two runs on one machine never share one (a fixed
10.244.78.1 was removed by whichever run ended first, under the other's pods)."""

from __future__ import annotations

import ipaddress
import subprocess

import pytest

from tests.e2e.kubenode import claim_lo_address, release_lo_address

#: A block of its own, so this test never takes an address a chart run is using.
BLOCK = ipaddress.ip_network("10.244.79.0/30")  # two hosts: .1 and .2


def on_lo(address: str) -> bool:
    shown = subprocess.run(
        ["ip", "-o", "addr", "show", "dev", "lo", "to", f"{address}/32"],
        capture_output=True,
        text=True,
        check=True,
    )
    return bool(shown.stdout.strip())


def test_two_runs_claim_two_addresses_and_a_third_finds_none():
    first = claim_lo_address(BLOCK)
    try:
        second = claim_lo_address(BLOCK)
        try:
            assert {first, second} == {"10.244.79.1", "10.244.79.2"}
            assert on_lo(first) and on_lo(second)
            with pytest.raises(RuntimeError, match="every address of 10.244.79.0/30 is held"):
                claim_lo_address(BLOCK)
        finally:
            release_lo_address(second)
        assert not on_lo(second) and on_lo(first)  # each run removes its own only
    finally:
        release_lo_address(first)
    assert not on_lo(first)
