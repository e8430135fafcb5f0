"""Writing a backend's ``MutateResult`` into the pod being admitted.

The webhook works on one copy of the pod: each result is applied to it in place and
recorded as the RFC 6902 operations the AdmissionReview answers with, so admission
costs the same for each container however many a pod has (no document copy, apply
and re-diff per container).
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from hami_core.errors import InvalidInputError
from hami_core.model import MutateResult
from hami_core.protocol.patches import pointer_token
from hami_core.protocol.quantity import parse_quantity_int


def apply_patch(doc: Any, ops: Any, *, in_place: bool = False) -> Any:
    """``doc`` with the RFC 6902 operations ``ops`` applied (a new document unless
    ``in_place``), sharing no object with ``ops``.

    jsonpatch 1.33 (our declared floor) puts an ``add`` operation's value object into the
    document as it is, so a later operation appending into that list or map changes the
    earlier operation's value too: a patch checked or applied that way and then sent or
    applied again adds those entries twice. The operations are copied first.

    Raises:
        jsonpatch.JsonPatchException, jsonpatch.JsonPointerException: an operation does
            not apply (from jsonpatch).
    """
    return jsonpatch.apply_patch(doc, copy.deepcopy(list(ops)), in_place=in_place)


#: Large enough for any quantity a backend states (memory in bytes would not fit int32).
_QUANTITY_MAX = 2**62


def apply_mutation(
    pod: dict[str, Any], container: dict[str, Any], path: str, result: MutateResult
) -> list[dict[str, Any]]:
    """Apply ``result`` to ``container`` (at JSON pointer ``path`` of ``pod``), in place.

    Returns: the operations that did it, in order (empty when nothing changed).
    Raises:
        InvalidInputError: the result's raw ``patch`` does not apply; names the cause.
    """
    ops: list[dict[str, Any]] = []

    def add(target: dict[str, Any], key: str, value: Any, pointer: str) -> None:
        target[key] = value
        # a copy: a new map or list is filled in place afterwards and each entry then
        # gets its own operation (an aliased value would add them twice: env entries)
        copied = value.copy() if isinstance(value, (dict, list)) else value
        ops.append({"op": "add", "path": pointer, "value": copied})

    if result.resources:
        if not isinstance(container.get("resources"), dict):
            add(container, "resources", {}, f"{path}/resources")
        resources = container["resources"]
        wanted = {}
        for name, value in result.resources.items():
            # a quantity as the user wrote it ("5k") when it means the same number
            stated = [
                r[name]
                for r in (resources.get("limits"), resources.get("requests"))
                if isinstance(r, dict) and name in r
            ]
            same = [q for q in stated if _same_quantity(q, value, name)]
            wanted[name] = same[0] if same else value
        for section in ("limits", "requests"):
            if not isinstance(resources.get(section), dict):
                add(resources, section, {}, f"{path}/resources/{section}")
            current = resources[section]
            for name, value in wanted.items():
                if name in current and _same_quantity(current[name], value, name):
                    continue
                add(current, name, value, f"{path}/resources/{section}/{pointer_token(name)}")
    if result.env:
        if not isinstance(container.get("env"), list):
            add(container, "env", [], f"{path}/env")
        env = container["env"]
        present = {e.get("name") for e in env if isinstance(e, dict)}
        for name, value in result.env.items():
            if name not in present:
                entry = {"name": name, "value": value}
                env.append(entry)
                ops.append({"op": "add", "path": f"{path}/env/-", "value": entry})
    spec = pod.setdefault("spec", {})
    if result.runtime_class_name and not spec.get("runtimeClassName"):
        add(spec, "runtimeClassName", result.runtime_class_name, "/spec/runtimeClassName")
    if result.patch:
        raw = [dict(op) for op in result.patch]
        try:
            apply_patch(pod, raw, in_place=True)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise InvalidInputError(f"a patch that does not apply: {exc}") from None
        ops.extend(raw)
    return ops


def _same_quantity(stated: object, value: int | str, name: str) -> bool:
    if stated == value:
        return True
    try:
        return parse_quantity_int(stated, resource=name, maximum=_QUANTITY_MAX) == (
            parse_quantity_int(value, resource=name, maximum=_QUANTITY_MAX)
        )
    except InvalidInputError:
        return False
