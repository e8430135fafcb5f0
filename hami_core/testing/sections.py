"""Test helpers for backend authors: a section as hooks receive it, a mutated pod."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpointer

from hami_core.model import MutateResult
from hami_core.plugin import BackendManager
from hami_core.protocol.config import HamiConfig, VendorConfig
from hami_core.webhook.mutation import apply_mutation


def section(plugin: object, **fields: Any) -> VendorConfig:
    """The complete, checked section ``plugin``'s hooks receive for a file stating
    ``fields`` (``VendorConfig`` attributes; ``options`` holds the backend-specific keys
    the file states, the rest keep the backend's ``option_defaults``).

    Raises:
        ConfigError: the backend's ``hami_check_config`` refuses the section.
        BackendError: ``plugin`` is not a valid backend.
    """
    info = plugin.hami_backend_info()  # type: ignore[attr-defined]
    stated = VendorConfig(**fields)
    manager = BackendManager.from_plugins(
        {info.name: plugin}, config=HamiConfig(vendors={info.name: stated})
    )
    return manager.vendor_config(info.name)


def mutated(pod: Mapping[str, Any], container_path: str, result: MutateResult) -> dict[str, Any]:
    """A copy of ``pod`` with ``result`` (one container's ``hami_mutate`` answer) written
    into the container at ``container_path`` as the webhook writes it.

    Raises:
        InvalidInputError: the result's raw patch does not apply.
    """
    out = copy.deepcopy(dict(pod))
    container = jsonpointer.resolve_pointer(out, container_path)
    apply_mutation(out, container, container_path, result)
    return out
