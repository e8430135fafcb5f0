#!/usr/bin/env python3
"""Stand-in for a CUDA program under MPS (tests only): does what the CUDA driver does at
initialization, as NVIDIA's MPS guide describes it, against the stand-in control daemon.

    mps_app.py ALLOC_MIB

It connects to the control daemon in ``$CUDA_MPS_PIPE_DIRECTORY`` (default
``/tmp/nvidia-mps``); if there is none it runs without MPS (no limits), as the driver
does. Otherwise it passes its own ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` and gets the limits the server applies to it. Prints
one JSON line: ``mps`` (connected), ``threads`` (percent), ``limit_mib`` (device 0's
pinned memory limit, null when none), ``alloc_ok`` (ALLOC_MIB on device 0 fits).
"""

from __future__ import annotations

import json
import os
import socket
import sys


def main() -> int:
    want = int(sys.argv[1])
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps"
    threads = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") or "-"
    pinned = os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") or "-"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(os.path.join(pipe, "control"))
            s.sendall(f"client_connect {threads} {pinned}\n".encode())
            reply = s.makefile().readline().split()
    except OSError:
        print(json.dumps({"mps": False, "threads": 100.0, "limit_mib": None, "alloc_ok": True}))
        return 0
    if reply[0] != "ok":
        print(" ".join(reply), file=sys.stderr)
        return 1
    limits = {}
    if reply[2] != "-":
        for part in reply[2].split(","):
            dev, _, mib = part.partition("=")
            limits[int(dev)] = int(mib)
    limit = limits.get(0)
    print(
        json.dumps(
            {
                "mps": True,
                "threads": float(reply[1]),
                "limit_mib": limit,
                "alloc_ok": limit is None or want <= limit,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
