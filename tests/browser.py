"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol with
websocket-client: load a page, wait for what its script draws, read the rendered DOM,
take screenshots. Used by the web view's tests and ``benchmarks/bench_ui.py``.

``chromium_path()`` finds the browser (``HAMI_CHROMIUM`` or ``chromium`` on PATH);
``scripts/chromium-install.sh`` installs it (``make install`` runs it).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket


def chromium_path() -> str | None:
    """The Chromium binary, or None when it is not installed."""
    return os.environ.get("HAMI_CHROMIUM") or shutil.which("chromium")


class Browser:
    """One headless Chromium with one tab (``with Browser() as b: b.open(url)``)."""

    def __init__(self, *, width: int = 1280, height: int = 900, timeout_s: float = 30.0) -> None:
        path = chromium_path()
        if path is None:
            raise RuntimeError("chromium is not installed (scripts/chromium-install.sh)")
        self._dir = tempfile.mkdtemp(prefix="hami-chromium-")
        args = [
            path,
            "--headless=new",
            "--no-sandbox",  # as root in a container; the pages are our own
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-port=0",
            f"--user-data-dir={self._dir}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        self._proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.timeout_s = timeout_s
        port = self._devtools_port()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            tabs = json.loads(r.read())
        page = next(t for t in tabs if t.get("type") == "page")
        self._ws = websocket.create_connection(
            page["webSocketDebuggerUrl"], timeout=timeout_s, suppress_origin=True
        )
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Network.enable")
        self.resize(width, height)

    def _devtools_port(self) -> int:
        assert self._proc.stderr is not None
        deadline = time.monotonic() + 30
        seen = []
        while time.monotonic() < deadline:
            line = self._proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                return int(m.group(1))
        self.close()
        raise RuntimeError("chromium did not start:\n" + "".join(seen[-20:]))

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the browser and remove its profile."""
        ws = getattr(self, "_ws", None)
        if ws is not None:
            ws.close()
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)
        shutil.rmtree(self._dir, ignore_errors=True)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events meanwhile kept in ``events``)."""
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result") or {})
            if "method" in msg:
                self.events.append(msg)

    def resize(self, width: int, height: int, *, mobile: bool = False) -> None:
        """Lay the page out at this viewport (CSS pixels)."""
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=mobile,
        )

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited when a promise).

        Raises:
            RuntimeError: it threw.
        """
        got = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in got:
            raise RuntimeError(f"{expression}: {got['exceptionDetails']}")
        return got.get("result", {}).get("value")

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait("document.readyState === 'complete'")

    def wait(self, condition: str, *, timeout_s: float | None = None) -> Any:
        """Poll a JavaScript expression until it is truthy; its value.

        Raises:
            TimeoutError: still falsy after ``timeout_s`` (default: the browser's).
        """
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            value = self.eval(condition)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"still false after {timeout_s or self.timeout_s}s: {condition}")
            time.sleep(0.05)

    def requested_urls(self) -> list[str]:
        """Every URL the page asked for since the last ``open``."""
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def screenshot(self, path: Path, *, full_page: bool = True) -> None:
        """A PNG of the page (its whole height when ``full_page``)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            metrics = self.send("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params["clip"] = {
                "x": 0,
                "y": 0,
                "width": size["width"],
                "height": min(size["height"], 4000),
                "scale": 1,
            }
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", **params)["data"]
        path.write_bytes(base64.b64decode(data))
