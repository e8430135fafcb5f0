"""The limiter's opt-out at Allocate: honoured only where an administrator allowed it.

``CUDA_DISABLE_CONTROL=true`` in a container's ``env`` makes a backend leave the shim's
preload out (PROTOCOL.md §7). The webhook denies it outside a namespace labelled
``hami.io/disable-control: allow``, but a webhook outage under ``failurePolicy: Ignore``
admits the pod unreviewed (docs/threat-model.md). So the device plugin checks the
namespace label itself, reading it from the API server (a tenant cannot write a
namespace's labels), and hands the backend a container without the variable where the
label is missing or cannot be read (fail closed: the limiter stays on).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from hami_core.errors import HamiError
from hami_core.protocol import annotations as keys

log = logging.getLogger(__name__)


def sets_opt_out(container: Mapping[str, Any]) -> bool:
    """True when the container's ``env`` names ``CUDA_DISABLE_CONTROL`` (any value)."""
    return any(
        isinstance(e, Mapping) and e.get("name") == keys.DISABLE_CONTROL_ENV
        for e in container.get("env") or []
    )


def allowed_container(
    container: Mapping[str, Any],
    namespace: str,
    namespace_labels: Callable[[str], Mapping[str, str]],
) -> Mapping[str, Any]:
    """``container`` as the backend may see it: unchanged unless it sets
    ``CUDA_DISABLE_CONTROL`` in a namespace not labelled ``hami.io/disable-control: allow``
    (or whose labels cannot be read), then a copy without it.

    Args:
        container: the container spec (``v1.Container`` JSON), read only.
        namespace: the pod's namespace.
        namespace_labels: namespace name -> its labels (the store's
            ``namespace_labels``); a ``HamiError`` it raises keeps the limiter on.
    """
    if not sets_opt_out(container):
        return container
    labels: Mapping[str, str] = {}
    try:
        labels = namespace_labels(namespace)
    except HamiError as exc:
        log.warning("cannot read namespace %s's labels (%s): the limiter stays on", namespace, exc)
    if labels.get(keys.DISABLE_CONTROL_LABEL) == keys.DISABLE_CONTROL_ALLOW:
        return container
    log.warning(
        "container %r in namespace %s sets %s but the namespace is not labelled %s=%s: "
        "ignored, the limiter stays on",
        container.get("name"),
        namespace,
        keys.DISABLE_CONTROL_ENV,
        keys.DISABLE_CONTROL_LABEL,
        keys.DISABLE_CONTROL_ALLOW,
    )
    env = [
        e
        for e in container.get("env") or []
        if not (isinstance(e, Mapping) and e.get("name") == keys.DISABLE_CONTROL_ENV)
    ]
    return {**container, "env": env}
