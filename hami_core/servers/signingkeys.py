"""Where the allocation-signing keys come from (PROTOCOL.md §4a).

The scheduler (``--allocation-signing-key``): a PEM file of its own (a mounted Secret an
operator manages), or ``secret:NAMESPACE/NAME``: a Secret read through the API and, when
absent, created at start with a new Ed25519 key (data key ``ed25519.key``), so a chart
needs no hook Job; of two replicas racing, one creates and the other reads what it wrote.
It then publishes its public key (``--allocation-public-keys-configmap``) into a
ConfigMap as ``<key id>.pem``, adding to what is listed and removing nothing (rotation).

The device plugin (``--allocation-public-keys``): ``configmap:NAMESPACE/NAME``, that
ConfigMap's ``*.pem`` entries read through the API (the chart: a new key is seen at
once, where a mounted volume lags kubelet's refresh by a minute and more), a PEM file, or
a directory of ``*.pem`` files; read again when a signature names a key id it does not
have, at most every ``RESCAN_S``.

The API functions take a ``kubernetes.client.ApiClient``; the rest is pure.
"""

from __future__ import annotations

import abc
import base64
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from hami_core.errors import ConfigError, ConflictError, HamiError, NotFoundError
from hami_core.protocol.config import namespaced_name_problem
from hami_core.protocol.documents import shown
from hami_core.protocol.signature import (
    AllocationSigner,
    generate_private_key_pem,
    load_public_keys,
)

log = logging.getLogger(__name__)

SECRET_PREFIX: Final = "secret:"
CONFIGMAP_PREFIX: Final = "configmap:"
#: The Secret's data key holding the PKCS#8 PEM private key.
SECRET_KEY: Final = "ed25519.key"
#: Shortest time between two reads of the public-key files (seconds).
RESCAN_S: Final = 2.0
WRITE_ATTEMPTS: Final = 5
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "hami"}


def namespaced(value: str, flag: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` split in two.

    Raises:
        ConfigError: not of that form, or a namespace or name the API server refuses
            (``protocol.config.namespaced_name_problem``), naming ``flag``.
    """
    problem = namespaced_name_problem(value)
    if problem:
        raise ConfigError(f"{flag} {shown(value)} {problem}")
    namespace, _, name = value.partition("/")
    return namespace, name


def signer_from_setting(
    value: str | None, *, flag: str, api_client: Any = None
) -> AllocationSigner:
    """The scheduler's signer from ``--allocation-signing-key``.

    Args:
        value: a PEM file path, or ``secret:NAMESPACE/NAME``.
        api_client: a ``kubernetes.client.ApiClient`` (for ``secret:``) allowed to get
            that Secret and create Secrets in its namespace.

    Raises:
        ConfigError: unset, an unreadable or malformed key, a Secret without
            ``ed25519.key``, or the Secret cannot be read or written; names ``flag``.
    """
    if not value:
        raise ConfigError(
            f"{flag} is not set: the scheduler signs every allocation it writes "
            "(PROTOCOL.md §4a); give a PEM file of an Ed25519 private key or "
            "secret:NAMESPACE/NAME (created when absent)"
        )
    if value.startswith(SECRET_PREFIX):
        namespace, name = namespaced(value[len(SECRET_PREFIX) :], flag)
        pem = ensure_signing_secret(api_client, namespace=namespace, name=name, flag=flag)
        return AllocationSigner(pem, setting=f"{flag} {value} ({SECRET_KEY})")
    try:
        pem = Path(value).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{flag} {value}: cannot read the key: {exc.strerror or exc}") from None
    return AllocationSigner(pem, setting=f"{flag} {value}")


def ensure_signing_secret(api_client: Any, *, namespace: str, name: str, flag: str) -> bytes:
    """The private key PEM kept in ``Secret namespace/name``, created with a new key when
    the Secret is absent. An existing Secret is never overwritten.

    Raises:
        ConfigError: the Secret exists without a readable ``ed25519.key``, or cannot be
            read or created (the API error named).
    """
    from kubernetes import client as k8s

    from hami_core.cluster.kube import call

    core = k8s.CoreV1Api(api_client)
    what = f"{flag}: secret {namespace}/{name}"
    for _ in range(WRITE_ATTEMPTS):
        try:
            secret = call(f"read {what}", core.read_namespaced_secret, name, namespace)
        except NotFoundError:
            secret = None
        except HamiError as exc:
            raise ConfigError(str(exc)) from exc
        if secret is not None:
            raw = (secret.get("data") or {}).get(SECRET_KEY)
            if not raw:
                raise ConfigError(f"{what} has no {SECRET_KEY}")
            try:
                return base64.b64decode(raw, validate=True)
            except ValueError:
                raise ConfigError(f"{what}: {SECRET_KEY} is not base64") from None
        pem = generate_private_key_pem()
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "labels": MANAGED_BY},
            "type": "Opaque",
            "data": {SECRET_KEY: base64.b64encode(pem).decode("ascii")},
        }
        try:
            call(f"create {what}", core.create_namespaced_secret, namespace, body)
        except ConflictError:
            continue  # another replica created it: read theirs
        except HamiError as exc:
            raise ConfigError(str(exc)) from exc
        log.info("created %s with a new allocation-signing key", what)
        return pem
    raise ConfigError(f"{what}: lost {WRITE_ATTEMPTS} races with other writers")


def publish_public_key(api_client: Any, signer: AllocationSigner, *, value: str, flag: str) -> bool:
    """Add the signer's public key to ``ConfigMap NAMESPACE/NAME`` (``value``) as
    ``<key id>.pem``, creating the ConfigMap when absent; other keys are kept.

    Returns:
        True when it wrote, False when the key was listed already.

    Raises:
        ConfigError: the ConfigMap cannot be read or written, naming ``flag``.
    """
    from kubernetes import client as k8s

    from hami_core.cluster.kube import call

    namespace, name = namespaced(value, flag)
    core = k8s.CoreV1Api(api_client)
    what = f"{flag}: configmap {namespace}/{name}"
    entry = f"{signer.key_id}.pem"
    pem = signer.public_pem().decode("ascii")
    for _ in range(WRITE_ATTEMPTS):
        try:
            try:
                cm = call(f"read {what}", core.read_namespaced_config_map, name, namespace)
            except NotFoundError:
                body = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": namespace, "labels": MANAGED_BY},
                    "data": {entry: pem},
                }
                call(f"create {what}", core.create_namespaced_config_map, namespace, body)
                log.info("published allocation key %s in a new %s", signer.key_id, what)
                return True
            if (cm.get("data") or {}).get(entry) == pem:
                return False
            rv = (cm.get("metadata") or {}).get("resourceVersion")
            patch = {"metadata": {"resourceVersion": rv}, "data": {entry: pem}}
            call(
                f"update {what}",
                core.patch_namespaced_config_map,
                name,
                namespace,
                patch,
                _content_type="application/merge-patch+json",
            )
            log.info("published allocation key %s in %s", signer.key_id, what)
            return True
        except ConflictError:
            continue
        except HamiError as exc:
            raise ConfigError(str(exc)) from exc
    raise ConfigError(f"{what}: lost {WRITE_ATTEMPTS} races with other writers")


class _RescannedKeys(abc.ABC):
    """Public keys by key id, read by ``_read`` at start and again when the last read is
    ``rescan_s`` old (the rescan of ``PublicKeyFiles`` and ``PublicKeysConfigMap``)."""

    rescan_s: float
    _lock: threading.Lock
    _read_at: float
    _keys: Mapping[str, Any]

    @abc.abstractmethod
    def _read(self) -> Mapping[str, Any]:
        """Every public key of the source, by key id (each subclass reads its own)."""

    def __call__(self) -> Mapping[str, Any]:
        """The keys by key id, read again when the last read is ``rescan_s`` old.

        Raises:
            ConfigError: as at start (a key file or entry broken since).
        """
        with self._lock:
            if time.monotonic() - self._read_at >= self.rescan_s:
                self._read_at = time.monotonic()
                self._keys = self._read()
            return self._keys

    def key_ids(self) -> tuple[str, ...]:
        """The key ids of the last read."""
        return tuple(sorted(self._keys))


class PublicKeyFiles(_RescannedKeys):
    """The device plugin's public keys from a PEM file or a directory of ``*.pem``
    files (``--allocation-public-keys``): callable, for ``AllocationVerifier``."""

    def __init__(self, path: str, *, flag: str, rescan_s: float = RESCAN_S) -> None:
        """Reads the keys once, so a bad path or key stops the start.

        Raises:
            ConfigError: the path does not exist, or a file is not an Ed25519 public
                key; names ``flag`` and the file.
        """
        self.path = path
        self.flag = flag
        self.rescan_s = rescan_s
        self._lock = threading.Lock()
        self._read_at = 0.0
        self._keys: Mapping[str, Any] = {}
        self._keys = self._read()
        self._read_at = time.monotonic()

    def _files(self) -> list[Path]:
        path = Path(self.path)
        if path.is_dir():
            # a mounted ConfigMap: each key a link to ..data/<key>; the ..* entries skipped
            return sorted(
                p
                for p in path.iterdir()
                if p.name.endswith(".pem") and not p.name.startswith(".") and p.is_file()
            )
        if path.is_file():
            return [path]
        raise ConfigError(f"{self.flag} {self.path}: no such file or directory")

    def _read(self) -> Mapping[str, Any]:
        pems = []
        for f in self._files():
            try:
                pems.append((f"{self.flag} {f}", f.read_bytes()))
            except OSError as exc:
                raise ConfigError(f"{self.flag} {f}: {exc.strerror or exc}") from None
        return load_public_keys(pems)


class PublicKeysConfigMap(_RescannedKeys):
    """The device plugin's public keys from a ConfigMap's ``*.pem`` entries, read through
    the API (``--allocation-public-keys configmap:NAMESPACE/NAME``): callable, for
    ``AllocationVerifier``. A missing ConfigMap lists no key (the scheduler publishes it
    at its first start)."""

    def __init__(
        self, api_client: Any, value: str, *, flag: str, rescan_s: float = RESCAN_S
    ) -> None:
        """Reads the keys once, so a bad reference, a refused read or a bad key stops
        the start.

        Raises:
            ConfigError: ``value`` is not ``NAMESPACE/NAME``, the read failed (the API
                error named) or an entry is not an Ed25519 public key; names ``flag``.
        """
        self.namespace, self.name = namespaced(value, flag)
        self.flag = flag
        self.rescan_s = rescan_s
        self._api = api_client
        self._lock = threading.Lock()
        self._keys: Mapping[str, Any] = self._read()
        self._read_at = time.monotonic()

    def _read(self) -> Mapping[str, Any]:
        from kubernetes import client as k8s

        from hami_core.cluster.kube import call

        what = f"{self.flag}: configmap {self.namespace}/{self.name}"
        try:
            cm = call(
                f"read {what}",
                k8s.CoreV1Api(self._api).read_namespaced_config_map,
                self.name,
                self.namespace,
            )
        except NotFoundError:
            return {}
        except HamiError as exc:
            raise ConfigError(str(exc)) from exc
        data = cm.get("data") or {}
        return load_public_keys(
            (f"{what} {k}", str(v).encode()) for k, v in sorted(data.items()) if k.endswith(".pem")
        )
