"""A real, throwaway Kubernetes control plane on loopback for end-to-end tests.

etcd + kube-apiserver (+ kube-scheduler on demand) v1.20.2, built from Debian's packages by
``scripts/kube-build.sh`` (recipe: shared/REAL-KUBE.md). No kubelet is needed for scheduling
tests: :meth:`ControlPlane.add_fake_node` creates Node objects and sets their status through
the ``status`` subresource, and pods then get bound onto them (they stay Pending with
``spec.nodeName`` set).

This module does not depend on pytest::

    with ControlPlane() as cp:
        cp.start_scheduler(extender_url="http://127.0.0.1:8888",
                           managed_resources=["nvidia.com/gpu"])
        cp.add_fake_node("gpu-node-1", capacity={"nvidia.com/gpu": "4"})
        core = kubernetes.client.CoreV1Api(cp.api_client())

Binaries are looked up in ``$HAMI_KUBE_BIN``, else in the cache directory that
``scripts/kube-build.sh`` fills (``${XDG_CACHE_HOME:-~/.cache}/hami/kube-1.20.2/bin``).
:func:`ensure_kube_binaries` runs the script (a no-op in about a second once built).

Set ``HAMI_E2E_KEEP=1`` to keep the scratch directory (configs, data, process logs) after
:meth:`ControlPlane.stop`.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import datetime as _dt
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

KUBE_VERSION = "1.20.2"
REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "kube-build.sh"
REQUIRED_BINARIES = ("etcd", "kube-apiserver", "kube-scheduler")
LOOPBACK = "127.0.0.1"

__all__ = [
    "ControlPlane",
    "ControlPlaneError",
    "KubeBinariesMissing",
    "default_bin_dir",
    "ensure_kube_binaries",
    "find_kube_binaries",
    "free_port",
]


def _client_connection(kubeconfig: Path, qps: float | None) -> dict[str, Any]:
    """kube-scheduler's ``clientConnection``: the kubeconfig, and with ``qps`` its
    client's rate limit (burst twice it) instead of the defaults (50 / 100)."""
    out: dict[str, Any] = {"kubeconfig": str(kubeconfig)}
    if qps is not None:
        out["qps"] = qps
        out["burst"] = int(2 * qps)
    return out


class ControlPlaneError(RuntimeError):
    """A control-plane process failed to start or died; the message carries log tails."""


class KubeBinariesMissing(ControlPlaneError):
    """The kube binaries are not built / not where they were looked for."""


# --------------------------------------------------------------------------------------
# Binaries
# --------------------------------------------------------------------------------------


def default_bin_dir() -> Path:
    """The directory ``scripts/kube-build.sh`` caches the binaries in."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    base = os.environ.get("HAMI_KUBE_CACHE") or os.path.join(cache, "hami", f"kube-{KUBE_VERSION}")
    return Path(base) / "bin"


def _missing(bin_dir: Path, names: Iterable[str]) -> list[str]:
    return [n for n in names if not os.access(bin_dir / n, os.X_OK)]


def find_kube_binaries(required: Sequence[str] = REQUIRED_BINARIES) -> Path:
    """Return the bin directory holding ``required``, or raise :class:`KubeBinariesMissing`.

    ``$HAMI_KUBE_BIN`` wins over the build script's cache directory.
    """
    env = os.environ.get("HAMI_KUBE_BIN")
    bin_dir = Path(env) if env else default_bin_dir()
    missing = _missing(bin_dir, required)
    if missing:
        where = "$HAMI_KUBE_BIN" if env else "the kube-build cache"
        raise KubeBinariesMissing(
            f"missing {', '.join(missing)} in {bin_dir} ({where}). "
            f"Run {BUILD_SCRIPT.relative_to(REPO_ROOT)} first (builds Kubernetes v{KUBE_VERSION} "
            f"from Debian's packages, ~6-8 min once, then cached), or point HAMI_KUBE_BIN at a "
            f"directory holding {', '.join(REQUIRED_BINARIES)}."
        )
    return bin_dir


def ensure_kube_binaries(*, stream: IO[str] | None = None, timeout: float = 3600) -> Path:
    """Return the bin directory, running ``scripts/kube-build.sh`` when needed.

    With ``$HAMI_KUBE_BIN`` set the script is not run. The script's progress (its stderr)
    is copied line by line to ``stream`` (default: ``sys.stderr``); its last stdout line is
    the bin dir. A failure raises :class:`KubeBinariesMissing` with the end of that output.
    """
    if os.environ.get("HAMI_KUBE_BIN"):
        return find_kube_binaries()
    out = stream if stream is not None else sys.stderr
    proc = subprocess.Popen(
        ["bash", str(BUILD_SCRIPT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        cwd=REPO_ROOT,
    )
    stdout_lines: list[str] = []
    reader = threading.Thread(target=lambda: stdout_lines.extend(proc.stdout), daemon=True)
    reader.start()
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    tail: collections.deque[str] = collections.deque(maxlen=40)
    try:
        for line in proc.stderr:
            tail.append(line)
            with contextlib.suppress(Exception):
                out.write(line)
                out.flush()
        rc = proc.wait()
    finally:
        killer.cancel()
        reader.join(10)
    if rc != 0:
        raise KubeBinariesMissing(
            f"{BUILD_SCRIPT.relative_to(REPO_ROOT)} failed with exit code {rc}"
            f"{' (timed out)' if rc == -signal.SIGKILL else ''}:\n{''.join(tail)}"
        )
    lines = [ln.strip() for ln in stdout_lines if ln.strip()]
    if not lines:
        raise KubeBinariesMissing(f"{BUILD_SCRIPT} printed no bin directory")
    bin_dir = Path(lines[-1])
    missing = _missing(bin_dir, REQUIRED_BINARIES)
    if missing:
        raise KubeBinariesMissing(f"{BUILD_SCRIPT} reported {bin_dir} but {missing} are missing")
    return bin_dir


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port free on ``host`` right now (the usual small race applies)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _free_ports(n: int) -> list[int]:
    # Hold all sockets open while picking so the n ports are distinct.
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tail(path: Path, max_bytes: int = 6000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read().decode("utf-8", "replace")
        return ("...\n" if size > max_bytes else "") + data
    except FileNotFoundError:
        return "(no log)"


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except Exception:
        pass


# Loopback only: never send our health probes through an http(s)_proxy from the environment.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _etcd_arch_env() -> dict[str, str] | None:
    # etcd 3.4 refuses to start on architectures other than amd64 without this.
    machine = os.uname().machine
    if machine in ("x86_64", "amd64"):
        return None
    goarch = {"aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}.get(machine, machine)
    return {"ETCD_UNSUPPORTED_ARCH": os.environ.get("ETCD_UNSUPPORTED_ARCH", goarch)}


@dataclass
class _Proc:
    name: str
    argv: list[str]
    popen: subprocess.Popen
    log_path: Path
    log_file: IO[bytes] = field(repr=False)

    def alive(self) -> bool:
        return self.popen.poll() is None


# --------------------------------------------------------------------------------------
# The control plane
# --------------------------------------------------------------------------------------


class ControlPlane:
    """etcd + kube-apiserver (+ kube-scheduler) on loopback, in a scratch directory.

    Attributes set by :meth:`start`: ``api_url``, ``token``, ``kubeconfig_path`` (token,
    insecure-skip-tls-verify), ``workdir``, ``ca_cert_path`` (the apiserver's self-signed
    serving cert + CA), ``etcd_url``, ``startup_seconds``.

    Processes run in their own sessions with PR_SET_PDEATHSIG (SIGKILL), so they die with
    the thread that started them: start them from a thread that outlives them (the main
    thread), or pass ``kill_with_parent=False``.
    """

    def __init__(
        self,
        bin_dir: str | os.PathLike | None = None,
        *,
        workdir: str | os.PathLike | None = None,
        keep_workdir: bool | None = None,
        ready_timeout: float = 90.0,
        stop_timeout: float = 10.0,
        kill_with_parent: bool = True,
        bind_address: str = LOOPBACK,
        disable_admission_plugins: Sequence[str] = ("ServiceAccount", "TaintNodesByCondition"),
    ) -> None:
        self.bin_dir = Path(bin_dir) if bin_dir is not None else None
        self._workdir_arg = Path(workdir) if workdir is not None else None
        if keep_workdir is None:
            keep_workdir = os.environ.get("HAMI_E2E_KEEP", "") not in ("", "0", "false")
        self.keep_workdir = keep_workdir
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.kill_with_parent = kill_with_parent
        # An address pods on a node's pod network can reach (e.g. one put on lo) makes
        # the API server usable from pods that are not on the host network.
        self.bind_address = bind_address
        # ServiceAccount stays off unless kube-controller-manager runs (it makes the
        # `default` service accounts and their token Secrets).
        self.disable_admission_plugins = tuple(disable_admission_plugins)

        self.workdir: Path | None = None
        self.token: str | None = None
        self.api_url: str | None = None
        self.kubeconfig_path: Path | None = None
        self.ca_cert_path: Path | None = None
        self.etcd_url: str | None = None
        self.scheduler_config_path: Path | None = None
        self.scheduler_healthz_url: str | None = None
        self.sa_key_path: Path | None = None
        self.startup_seconds: float | None = None
        self._procs: dict[str, _Proc] = {}
        self._stopped_logs: dict[str, Path] = {}
        self._api_client = None
        self._started = False

    # -- context manager ---------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None:
            sys.stderr.write(self.format_logs())
        self.stop()

    # -- processes ---------------------------------------------------------------------

    def _bin(self, name: str) -> str:
        assert self.bin_dir is not None
        return str(self.bin_dir / name)

    def start_process(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
    ) -> subprocess.Popen:
        """Start ``argv`` as a managed process: its stdout+stderr go to ``logs/<name>.log``,
        it is stopped by :meth:`stop` (or :meth:`stop_process`), and its log is part of
        :meth:`format_logs`. Later e2e code can run the project's own servers this way."""
        if self.workdir is None:
            raise ControlPlaneError("start() the control plane first")
        if name in self._procs and self._procs[name].alive():
            raise ControlPlaneError(f"process {name!r} is already running")
        log_dir = self.workdir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}.log"
        log_file = open(log_path, "ab", buffering=0)  # noqa: SIM115 (closed in stop_process)
        log_file.write(f"$ {' '.join(map(str, argv))}\n".encode())
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        popen = subprocess.Popen(
            [str(a) for a in argv],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=str(cwd) if cwd is not None else str(self.workdir),
            start_new_session=True,
            preexec_fn=_set_pdeathsig
            if (self.kill_with_parent and sys.platform == "linux")
            else None,
        )
        self._procs[name] = _Proc(name, [str(a) for a in argv], popen, log_path, log_file)
        return popen

    def stop_process(self, name: str) -> int | None:
        """SIGTERM ``name``, wait ``stop_timeout``, then SIGKILL. Returns its exit code."""
        proc = self._procs.pop(name, None)
        if proc is None:
            return None
        p = proc.popen
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(self.stop_timeout)
        with contextlib.suppress(Exception):
            proc.log_file.close()
        self._stopped_logs[name] = proc.log_path
        return p.returncode

    def log_paths(self) -> dict[str, Path]:
        """Log file of every process started (running or stopped) while the scratch dir exists."""
        out = dict(self._stopped_logs)
        out.update({n: p.log_path for n, p in self._procs.items()})
        return {n: p for n, p in out.items() if p.exists()}

    def format_logs(self, max_bytes: int = 6000) -> str:
        """The tail of every process log, for failure reports."""
        parts = []
        for name, path in sorted(self.log_paths().items()):
            proc = self._procs.get(name)
            state = (
                "running"
                if proc and proc.alive()
                else (f"exited {proc.popen.returncode}" if proc else "stopped")
            )
            parts.append(f"===== {name} ({state}) {path} =====\n{_tail(path, max_bytes)}\n")
        return "".join(parts)

    def _check_alive(self, *names: str) -> None:
        for name in names or tuple(self._procs):
            proc = self._procs.get(name)
            if proc is not None and not proc.alive():
                raise ControlPlaneError(
                    f"{name} exited with code {proc.popen.returncode}\n{self.format_logs()}"
                )

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> ControlPlane:
        """Start etcd and kube-apiserver; return once ``/readyz`` says ok."""
        if self._started:
            return self
        t0 = time.monotonic()
        if self.bin_dir is None:
            self.bin_dir = find_kube_binaries()
        else:
            missing = _missing(self.bin_dir, REQUIRED_BINARIES)
            if missing:
                raise KubeBinariesMissing(
                    f"missing {missing} in {self.bin_dir}; run {BUILD_SCRIPT} first"
                )
        for attempt in (1, 2):
            if self._workdir_arg is not None:
                self._workdir_arg.mkdir(parents=True, exist_ok=True)
                self.workdir = self._workdir_arg
            else:
                self.workdir = Path(tempfile.mkdtemp(prefix="hami-kube-"))
            self._started = True
            atexit.register(self.stop)
            try:
                self._start_etcd()
                self._start_apiserver()
                self._wait_ready()
                break
            except ControlPlaneError as e:
                # A free port picked can be taken by someone else before we bind it.
                self.stop()
                if attempt == 1 and "address already in use" in str(e):
                    continue
                raise
            except BaseException:
                logs = self.format_logs()
                self.stop()
                sys.stderr.write(logs)
                raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _start_etcd(self) -> None:
        assert self.workdir is not None
        client_port, peer_port = _free_ports(2)
        self.etcd_url = f"http://{LOOPBACK}:{client_port}"
        peer_url = f"http://{LOOPBACK}:{peer_port}"
        self.start_process(
            "etcd",
            [
                self._bin("etcd"),
                "--name=hami-e2e",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=hami-e2e={peer_url}",
                "--initial-cluster-state=new",
                "--logger=zap",
                "--log-outputs=stderr",
                "--log-level=warn",
            ],
            env=_etcd_arch_env(),
        )

    def _start_apiserver(self) -> None:
        assert self.workdir is not None
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        pki = self.workdir / "pki"
        pki.mkdir(exist_ok=True)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        sa_key = pki / "sa.key"
        sa_pub = pki / "sa.pub"
        sa_key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        sa_pub.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM,
                serialization.PublicFormat.SubjectPublicKeyInfo,
            )
        )
        os.chmod(sa_key, 0o600)

        self.token = secrets.token_hex(24)
        tokens = pki / "tokens.csv"
        tokens.write_text(f'{self.token},admin,admin,"system:masters"\n')
        os.chmod(tokens, 0o600)

        (port,) = _free_ports(1)
        self.api_url = f"https://{self.bind_address}:{port}"
        self.sa_key_path = sa_key
        cert_dir = self.workdir / "certs"
        self.ca_cert_path = cert_dir / "apiserver.crt"
        self.start_process(
            "kube-apiserver",
            [
                self._bin("kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                f"--bind-address={self.bind_address}",
                f"--secure-port={port}",
                f"--cert-dir={cert_dir}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                "--service-cluster-ip-range=10.0.0.0/24",
                *(
                    [f"--disable-admission-plugins={','.join(self.disable_admission_plugins)}"]
                    if self.disable_admission_plugins
                    else []
                ),
                "--allow-privileged=true",
                "--profiling=false",
            ],
        )
        self._write_kubeconfig()

    def _write_kubeconfig(self) -> None:
        assert self.workdir is not None
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "hami-e2e",
                    "cluster": {"server": self.api_url, "insecure-skip-tls-verify": True},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "hami-e2e", "context": {"cluster": "hami-e2e", "user": "admin"}}],
            "current-context": "hami-e2e",
        }
        self.kubeconfig_path = self.workdir / "kubeconfig"
        self.kubeconfig_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        os.chmod(self.kubeconfig_path, 0o600)

    def _get(self, path: str, timeout: float = 2.0) -> tuple[int, str]:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(
            f"{self.api_url}{path}", headers={"Authorization": f"Bearer {self.token}"}
        )
        try:
            opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx)
            )
            with opener.open(req, timeout=timeout) as resp:
                return resp.status, resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last = "no answer yet"
        stage = "/readyz"
        while True:
            self._check_alive("etcd", "kube-apiserver")
            try:
                status, body = self._get(stage)
                if stage == "/readyz" and status == 200 and body.strip() == "ok":
                    # The bootstrap controller creates `default` shortly after ready.
                    stage = "/api/v1/namespaces/default"
                    continue
                if stage != "/readyz" and status == 200:
                    return
                last = f"{stage}: HTTP {status}: {body[-500:]}"
            except (OSError, urllib.error.URLError) as e:
                last = f"{stage}: {e}"
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"kube-apiserver not ready after {self.ready_timeout:.0f} s ({last})\n"
                    f"{self.format_logs()}"
                )
            time.sleep(0.2)

    def kill_apiserver(self) -> None:
        """SIGKILL kube-apiserver (etcd keeps the data); :meth:`restart_apiserver` brings
        it back on the same address, certificates and tokens, so every client's
        kubeconfig still holds."""
        proc = self._procs.get("kube-apiserver")
        if proc is None:
            raise ControlPlaneError("kube-apiserver is not running")
        self._apiserver_argv = proc.argv
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(10)
        self.stop_process("kube-apiserver")

    def restart_apiserver(self) -> None:
        """Start kube-apiserver again as it was started (after :meth:`kill_apiserver`);
        return once ``/readyz`` says ok."""
        argv = getattr(self, "_apiserver_argv", None)
        if argv is None:
            raise ControlPlaneError("kill_apiserver() first")
        self.start_process("kube-apiserver", argv)
        self._wait_ready()

    def stop(self) -> None:
        """Stop every process (reverse start order) and remove the scratch dir."""
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if self._api_client is not None:
            with contextlib.suppress(Exception):
                self._api_client.close()
            self._api_client = None
        for name in reversed(list(self._procs)):
            with contextlib.suppress(Exception):
                self.stop_process(name)
        if self.workdir is not None and not self.keep_workdir and self._workdir_arg is None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self._stopped_logs.clear()
        elif self.workdir is not None:
            sys.stderr.write(f"[controlplane] kept scratch dir {self.workdir}\n")
        self._started = False

    @property
    def running(self) -> bool:
        return self._started and all(p.alive() for p in self._procs.values())

    # -- clients -----------------------------------------------------------------------

    def client_configuration(self, *, verify: bool = True):
        """A ``kubernetes.client.Configuration`` for the admin token.

        It trusts ``ca_cert_path``, the apiserver's self-signed bundle (its SANs include
        127.0.0.1); ``verify=False`` skips verification as the kubeconfig does."""
        from kubernetes import client

        if self.api_url is None:
            raise ControlPlaneError("start() the control plane first")
        cfg = client.Configuration()
        cfg.host = self.api_url
        cfg.api_key = {"authorization": self.token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        if verify:
            cfg.ssl_ca_cert = str(self.ca_cert_path)
        else:
            cfg.verify_ssl = False
        return cfg

    def api_client(self, *, new: bool = False, verify: bool = True):
        """An official ``kubernetes.client.ApiClient`` for this cluster: one shared client
        (closed by :meth:`stop`), or with ``new=True`` / ``verify=False`` a fresh one that
        the caller closes."""
        from kubernetes import client

        if new or not verify:
            return client.ApiClient(self.client_configuration(verify=verify))
        if self._api_client is None:
            self._api_client = client.ApiClient(self.client_configuration())
        return self._api_client

    def kubectl_env(self) -> dict[str, str]:
        """Environment for tools that read ``KUBECONFIG``."""
        return {"KUBECONFIG": str(self.kubeconfig_path)}

    # -- kube-scheduler ----------------------------------------------------------------

    def start_scheduler(
        self,
        *,
        extender_url: str,
        managed_resources: list[str],
        scheduler_name: str = "hami-scheduler",
        http_timeout: str | None = None,
        ignorable: bool = False,
        preempt_verb: str | None = None,
        extra_args: Sequence[str] = (),
        ready_timeout: float = 30.0,
        client_qps: float | None = None,
    ) -> subprocess.Popen:
        """Start kube-scheduler with one profile ``scheduler_name`` whose extender is at
        ``extender_url`` (filter / prioritize / bind verbs, weight 1, nodeCacheCapable;
        ``preempt_verb`` too when given). ``client_qps``: its API client's
        ``clientConnection.qps`` (burst twice that) instead of the defaults, 50 and 100.

        Every name in ``managed_resources`` is listed with ``ignoredByScheduler: true``.
        A scheduler started before is stopped first. An ``https://`` extender is called
        without verifying its certificate. kube-scheduler's healthz/metrics listener is put
        on a free loopback port (``scheduler_healthz_url``; with a config file 1.20 ignores
        ``--port=0`` and would bind 0.0.0.0:10251), and this returns once it answers ok,
        or raises with the log if kube-scheduler exits (e.g. on a bad config).
        """
        if self.workdir is None or self.kubeconfig_path is None:
            raise ControlPlaneError("start() the control plane first")
        self.stop_process("kube-scheduler")
        extender: dict[str, Any] = {
            "urlPrefix": extender_url.rstrip("/"),
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "bindVerb": "bind",
            "weight": 1,
            "nodeCacheCapable": True,
            "ignorable": ignorable,
            "managedResources": [
                {"name": r, "ignoredByScheduler": True} for r in managed_resources
            ],
        }
        if preempt_verb:
            extender["preemptVerb"] = preempt_verb
        if extender_url.startswith("https://"):
            extender["enableHTTPS"] = True
            extender["tlsConfig"] = {"insecure": True}
        if http_timeout is not None:
            extender["httpTimeout"] = http_timeout
        for attempt in (1, 2):
            (healthz_port,) = _free_ports(1)
            healthz = f"{LOOPBACK}:{healthz_port}"
            config = {
                "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": _client_connection(self.kubeconfig_path, client_qps),
                "leaderElection": {"leaderElect": False},
                "healthzBindAddress": healthz,
                "metricsBindAddress": healthz,
                "profiles": [{"schedulerName": scheduler_name}],
                "extenders": [extender],
            }
            self.scheduler_config_path = self.workdir / "kube-scheduler.yaml"
            self.scheduler_config_path.write_text(yaml.safe_dump(config, sort_keys=False))
            self.scheduler_healthz_url = f"http://{healthz}/healthz"
            popen = self.start_process(
                "kube-scheduler",
                [
                    self._bin("kube-scheduler"),
                    f"--config={self.scheduler_config_path}",
                    "--port=0",
                    "--secure-port=0",
                    *extra_args,
                ],
            )
            try:
                self._wait_http_ok(self.scheduler_healthz_url, "kube-scheduler", ready_timeout)
                return popen
            except ControlPlaneError as e:
                self.stop_process("kube-scheduler")
                if attempt == 1 and "address already in use" in str(e):
                    continue
                raise
        raise AssertionError("unreachable")

    def start_default_scheduler(
        self, *, ready_timeout: float = 30.0, client_qps: float | None = None
    ) -> subprocess.Popen:
        """Start a plain kube-scheduler for ``default-scheduler`` (no extender), as every
        cluster has: it places pods that name no scheduler, e.g. a chart's own pods.
        Process name ``kube-scheduler-default``; ``client_qps`` as ``start_scheduler``'s."""
        if self.workdir is None or self.kubeconfig_path is None:
            raise ControlPlaneError("start() the control plane first")
        self.stop_process("kube-scheduler-default")
        (healthz_port,) = _free_ports(1)
        healthz = f"{LOOPBACK}:{healthz_port}"
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": _client_connection(self.kubeconfig_path, client_qps),
            "leaderElection": {"leaderElect": False},
            "healthzBindAddress": healthz,
            "metricsBindAddress": healthz,
            "profiles": [{"schedulerName": "default-scheduler"}],
        }
        path = self.workdir / "kube-scheduler-default.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        popen = self.start_process(
            "kube-scheduler-default",
            [self._bin("kube-scheduler"), f"--config={path}", "--port=0", "--secure-port=0"],
        )
        self._wait_http_ok(f"http://{healthz}/healthz", "kube-scheduler-default", ready_timeout)
        return popen

    def start_controller_manager(
        self,
        *,
        controllers: Sequence[str] = (
            "*",
            "-nodelifecycle",
            "-nodeipam",
            "-route",
            "-service",
            "-cloud-node-lifecycle",
        ),
        ready_timeout: float = 60.0,
    ) -> subprocess.Popen:
        """Start kube-controller-manager (Deployments, ReplicaSets, DaemonSets, garbage
        collection, namespaces, service accounts and their token Secrets).

        It signs tokens with the API server's service-account key and puts
        ``ca_cert_path`` into each token Secret as ``ca.crt`` (what pods trust). The
        node lifecycle controller is off by default: fake nodes never heartbeat and
        would be tainted and emptied. Returns once its healthz answers ok.
        """
        if self.workdir is None or self.kubeconfig_path is None or self.sa_key_path is None:
            raise ControlPlaneError("start() the control plane first")
        if not os.access(self._bin("kube-controller-manager"), os.X_OK):
            raise KubeBinariesMissing(
                f"kube-controller-manager missing in {self.bin_dir}; run {BUILD_SCRIPT}"
            )
        self.stop_process("kube-controller-manager")
        (port,) = _free_ports(1)
        popen = self.start_process(
            "kube-controller-manager",
            [
                self._bin("kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig_path}",
                f"--service-account-private-key-file={self.sa_key_path}",
                f"--root-ca-file={self.ca_cert_path}",
                "--use-service-account-credentials=true",
                f"--controllers={','.join(controllers)}",
                "--leader-elect=false",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                "--port=0",
                f"--authentication-kubeconfig={self.kubeconfig_path}",
                f"--authorization-kubeconfig={self.kubeconfig_path}",
                "--authorization-always-allow-paths=/healthz",
                "--concurrent-deployment-syncs=2",
                "--concurrent-replicaset-syncs=2",
                "--profiling=false",
            ],
        )
        deadline = time.monotonic() + ready_timeout
        while True:
            self._check_alive("kube-controller-manager")
            try:
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                opener = urllib.request.build_opener(
                    urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx)
                )
                with opener.open(f"https://{LOOPBACK}:{port}/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        return popen
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"kube-controller-manager not healthy after {ready_timeout:.0f} s\n{self.format_logs()}"
                )
            time.sleep(0.3)

    def _wait_http_ok(self, url: str, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while True:
            self._check_alive(name)
            try:
                with _NO_PROXY.open(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}: {e.read()[-300:]!r}"
            except OSError as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{name} not healthy at {url} after {timeout:.0f} s ({last})\n"
                    f"{self.format_logs()}"
                )
            time.sleep(0.1)

    def stop_scheduler(self) -> None:
        self.stop_process("kube-scheduler")

    # -- nodes -------------------------------------------------------------------------

    def add_fake_node(
        self,
        name: str,
        *,
        annotations: Mapping[str, str] | None = None,
        capacity: Mapping[str, str | int] | None = None,
        labels: Mapping[str, str] | None = None,
        allocatable: Mapping[str, str | int] | None = None,
        ready: bool = True,
    ):
        """Create Node ``name`` and set its status (Ready, capacity, allocatable).

        ``capacity`` adds to / overrides cpu=64, memory=256Gi, pods=110; ``allocatable``
        defaults to the same. Returns the ``V1Node`` after the status update.
        """
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        node_labels.update(labels or {})
        core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": node_labels,
                    "annotations": dict(annotations or {}),
                },
            }
        )
        cap = {"cpu": "64", "memory": "256Gi", "pods": "110"}
        cap.update({k: str(v) for k, v in (capacity or {}).items()})
        alloc = dict(cap)
        alloc.update({k: str(v) for k, v in (allocatable or {}).items()})
        now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "capacity": cap,
            "allocatable": alloc,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "fake node for hami e2e",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": LOOPBACK},
                {"type": "Hostname", "address": name},
            ],
        }
        return core.patch_node_status(name, {"status": status})

    def delete_node(self, name: str) -> None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        try:
            client.CoreV1Api(self.api_client()).delete_node(name)
        except ApiException as e:
            if e.status != 404:
                raise

    def reset(self, *, namespaces: Iterable[str] | None = None) -> None:
        """Delete all Nodes and (at once, grace 0) all pods outside kube-system, or in
        ``namespaces``. Namespaces themselves are kept: with no controller-manager a
        deleted namespace would stay Terminating."""
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        if namespaces is None:
            namespaces = [
                ns.metadata.name
                for ns in core.list_namespace().items
                if ns.metadata.name not in ("kube-system", "kube-public", "kube-node-lease")
            ]
        for ns in namespaces:
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        core.delete_collection_node()

    def delete_pods(self, namespaces: Iterable[str]) -> None:
        """Delete (at once, grace 0) every pod in ``namespaces``, and wait until none is
        listed (a pod a real kubelet runs is gone when its kubelet confirms, or its node
        is deleted)."""
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        names = list(namespaces)
        for ns in names:
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        self.wait_for(
            lambda: not any(core.list_namespaced_pod(ns).items for ns in names),
            timeout=30,
            message=f"no pod left in {names}",
        )

    # -- waiting -----------------------------------------------------------------------

    def wait_for(
        self, predicate, *, timeout: float = 30.0, interval: float = 0.2, message: str = "condition"
    ):
        """Poll ``predicate()`` until it returns a truthy value (returned); on timeout
        raise ``TimeoutError`` with the process logs. Fails fast if a process died."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"timed out after {timeout} s waiting for {message}\n{self.format_logs()}"
                )
            time.sleep(interval)


def _main(argv: Sequence[str]) -> int:
    """``python tests/e2e/controlplane.py``: start a cluster, print how to use it, wait."""
    cp = ControlPlane(keep_workdir=False)
    cp.start()
    print(
        json.dumps(
            {
                "api_url": cp.api_url,
                "kubeconfig": str(cp.kubeconfig_path),
                "startup_seconds": round(cp.startup_seconds or 0, 2),
            },
            indent=2,
        )
    )
    print("Ctrl-C to stop", file=sys.stderr)
    try:
        while cp.running:
            time.sleep(1)
        sys.stderr.write(cp.format_logs())
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip cleanup
        cp.stop()


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
