"""The issue-24 attack run on per-container MPS pipe directories: the directory is the
tenant's (mounted writable at ``/tmp/nvidia-mps``), and the device plugin talks to the
daemon in it through the path ``<dir>/control``, which the tenant can replace with a
symbolic link. Left behind by a pod that has ended, a link to a live neighbour's socket
(its host path under ``mpsPipeDirectory``) made the release round send ``quit`` to the
neighbour's daemon: its MPS server ended and its clients with it. The device plugin now
speaks only to a socket that is a socket, never through a link.

The daemons are the stand-in ``nvidia-cuda-mps-control`` (``test_mps_server_limits``)."""

from __future__ import annotations

import os

from hami_nvidia import mps

from .conftest import ctr, gpu_pod
from .test_mps_server_limits import (  # noqa: F401 (fake, pipe_root: fixtures)
    CONTROL,
    app,
    bind,
    fake,
    pipe_of,
    pipe_root,
    setup,
)


def test_a_gone_tenants_link_to_a_neighbours_socket_does_not_quit_the_neighbour(
    fake,  # noqa: F811
    tmp_path,
    pipe_root,  # noqa: F811
):
    tenant = gpu_pod("tenant", ctr("main", gpu=1, gpumem=3000, gpucores=30))
    neighbour = gpu_pod("neighbour", ctr("main", gpu=1, gpumem=3000, gpucores=30))
    cluster, allocator, agent, ids = setup(tmp_path, pipe_root, "per-container", neighbour)
    theirs = pipe_of(allocator.allocate([[ids[0]]])[0])
    bind(cluster, agent, tenant)
    mine = pipe_of(allocator.allocate([[ids[4]]])[0])
    assert mine != theirs

    # The tenant, from inside its container: its own daemon quit, its socket replaced by
    # a link to the neighbour's socket (the host path; the device plugin resolves it).
    mps.control(CONTROL, str(mine), "quit")
    (mine / "control").unlink(missing_ok=True)
    os.symlink(theirs / "control", mine / "control")

    live = [cluster.get_pod("default", "neighbour")]  # the tenant's pod has ended
    lines = mps.release(CONTROL, str(pipe_root), live, clock=lambda: 1e12)

    # (the round may also restart a daemon it finds quit, which hides the attack from a
    # client: the neighbour's server and every client of it ended all the same)
    assert not any("restarted" in line for line in lines), lines
    assert app(theirs, 1)["mps"] is True, "the neighbour's daemon was quit"
    assert any("quit the MPS control daemon" in line for line in lines), lines
    assert not mine.exists() and theirs.exists()


def test_a_live_tenants_link_is_not_taken_for_its_daemon(
    fake,  # noqa: F811
    tmp_path,
    pipe_root,  # noqa: F811
):
    """A live tenant whose daemon ended (a device plugin restart) and whose socket is a
    link to the neighbour's: the round must start the tenant's own daemon again, not take
    the neighbour's answer for it."""
    tenant = gpu_pod("tenant", ctr("main", gpu=1, gpumem=3000, gpucores=30))
    neighbour = gpu_pod("neighbour", ctr("main", gpu=1, gpumem=3000, gpucores=100))
    cluster, allocator, agent, ids = setup(tmp_path, pipe_root, "per-container", neighbour)
    theirs = pipe_of(allocator.allocate([[ids[4]]])[0])
    bind(cluster, agent, tenant)
    mine = pipe_of(allocator.allocate([[ids[0]]])[0])
    mps.control(CONTROL, str(mine), "quit")
    (mine / "control").unlink(missing_ok=True)
    os.symlink(theirs / "control", mine / "control")

    live = [cluster.get_pod("default", n) for n in ("tenant", "neighbour")]
    lines = mps.release(CONTROL, str(pipe_root), live, clock=lambda: 1e12)

    assert any("restarted" in line for line in lines), lines
    assert not (mine / "control").is_symlink()
    assert app(mine, 1)["threads"] == 30.0  # its own daemon, with its own share
