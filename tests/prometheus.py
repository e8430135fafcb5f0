"""A real Prometheus for the tests: Debian's ``prometheus`` package (server + promtool),
installed once by scripts/prometheus-install.sh, and helpers to run a server that
scrapes given targets and to query it through its HTTP API.

Also the PromQL the project ships: every expression of the chart's dashboards and
alert rules, and HAMi's own dashboard (tests/fixtures/hami-dashboard-queries.txt).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
INSTALL = REPO / "scripts" / "prometheus-install.sh"
CHART = REPO / "charts" / "hami"
RULES = CHART / "rules" / "hami-alerts.rules.yaml"
RULE_TESTS = CHART / "rules" / "hami-alerts.test.yaml"
DASHBOARDS = CHART / "dashboards"
HAMI_QUERIES = REPO / "tests" / "fixtures" / "hami-dashboard-queries.txt"


class PrometheusUnavailable(RuntimeError):
    """Prometheus could not be installed here; the message has the installer's output."""


def prometheus_bin() -> Path:
    """The directory holding ``prometheus`` and ``promtool`` (installed when missing).

    Raises:
        PrometheusUnavailable: the installer failed.
    """
    proc = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise PrometheusUnavailable(f"{INSTALL} failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def dashboard_queries() -> list[tuple[str, str]]:
    """``(where, expr)`` for every target of every dashboard the chart ships."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel["targets"]:
                out.append((f"{path.stem}: {panel['title']} [{target['refId']}]", target["expr"]))
    return out


def rule_queries() -> list[tuple[str, str]]:
    """``(alert name, expr)`` for every rule of the chart's rules file."""
    rules = yaml.safe_load(RULES.read_text())
    return [
        (rule.get("alert") or rule.get("record"), rule["expr"].strip())
        for group in rules["groups"]
        for rule in group["rules"]
    ]


def hami_queries() -> list[tuple[str, str]]:
    """``(line, expr)`` of HAMi's Grafana dashboard (comments and blanks skipped)."""
    lines = HAMI_QUERIES.read_text().splitlines()
    return [
        (f"HAMi dashboard line {i + 1}", line.strip())
        for i, line in enumerate(lines)
        if line.strip() and not line.startswith("#")
    ]


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    """Grafana's template variables (``$node``) replaced as a dashboard would."""
    return re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), m.group(0)), expr)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer:
    """A Prometheus server in ``workdir`` scraping ``targets`` every second.

    Args:
        targets: job name -> ``host:port`` list.
        rule_files: rules files it evaluates (every second).
    """

    def __init__(
        self,
        bin_dir: Path,
        workdir: Path,
        targets: Mapping[str, Iterable[str]],
        *,
        rule_files: Iterable[Path] = (),
    ) -> None:
        self.bin_dir = bin_dir
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "prometheus.yml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(p) for p in rule_files],
                    "scrape_configs": [
                        {"job_name": job, "static_configs": [{"targets": list(addrs)}]}
                        for job, addrs in targets.items()
                    ],
                }
            )
        )
        self.log = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> PrometheusServer:
        self.proc = subprocess.Popen(
            [
                str(self.bin_dir / "prometheus"),
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}:\n{self.logs()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"prometheus not ready within {timeout}s:\n{self.logs()}")

    def logs(self, max_bytes: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-max_bytes:] if self.log.exists() else ""

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant vector result of ``expr`` now: ``[{"metric": {...}, "value": [t, "v"]}]``.

        Raises:
            AssertionError: Prometheus rejects the expression (the message has why).
        """
        try:
            data = self.api("query", query=expr)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{expr}: {exc.read().decode(errors='replace')}") from None
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
