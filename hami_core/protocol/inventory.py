"""Node inventory annotation codec (PROTOCOL.md §2).

JSON form (HAMi >= 2.5): an array, one object per device, keys ``id index count devmem
devcore type numa mode health`` and, for a GPU in ``mig`` mode, ``migProfiles`` (HAMi
2.10: ``[{"name", "memoryMB", "core", "sliceCount", "placements": [{"start",
"size"}]}]``); HAMi omits zero values, so a reader takes a missing key
as the zero value (``health`` missing = unhealthy). Legacy form: per device
``id,count,devmem,devcore,type,numa,health[,index,mode]`` followed by ``:``.

Read as HAMi 2.10 reads it (Go ``encoding/json`` into ``device.DeviceInfo``): a key
matches its field exactly or, failing that, case-insensitively (``"ID"``, ``"Devmem"``:
``pkg/device/ascend/device_test.go::Test_GetNodeDevices``); a ``mode`` other than ours is
kept as written (``pkg/device/hygon/device_test.go::Test_GetNodeDevices`` reads mode
``test``): such a device is matched by no ``nvidia.com/vgpu-mode`` filter.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hami_core.errors import AnnotationError
from hami_core.model import DEVICE_MODES, DeviceInfo, MigPlacement, MigProfile

#: Largest node annotation value decoded (bytes). A node of 16 GPUs registers about 4 KiB;
#: Kubernetes caps all annotations of an object together at 256 KiB
#: (``apimachinery/pkg/api/validation.TotalAnnotationSizeLimitB``).
MAX_NODE_ANNOTATION_BYTES = 64 * 1024
#: A vendor's own mode token: what a device list or a label value can carry.
_MODE_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_JSON_FIELDS = ("id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health")


def encode_inventory(devices: tuple[DeviceInfo, ...] | list[DeviceInfo]) -> str:
    """Encode devices as the JSON inventory, zero values omitted as HAMi does.

    Args:
        devices: the node's devices of one vendor, in index order.

    Returns:
        A compact JSON array, e.g. ``[{"id":"GPU-a","count":10,"devmem":16384,...}]``.
    """
    out = []
    for d in devices:
        item: dict[str, Any] = {
            "id": d.uuid,
            "index": d.index,
            "count": d.split_count,
            "devmem": d.memory_mib,
            "devcore": d.cores_pct,
            "type": d.model,
            "numa": d.numa,
            "mode": d.mode,
            "health": d.healthy,
        }
        kept = {k: v for k, v in item.items() if v not in (0, "", False)}
        if d.mig_profiles:
            kept["migProfiles"] = [_encode_profile(p) for p in d.mig_profiles]
        out.append(kept)
    return json.dumps(out, separators=(",", ":"))


def _encode_profile(p: MigProfile) -> dict[str, Any]:
    return {
        "name": p.name,
        "memoryMB": p.memory_mib,
        "core": p.cores_pct,
        "sliceCount": p.slice_count,
        "placements": [{"start": x.start, "size": x.size} for x in p.placements],
    }


def _decode_profiles(item: dict[str, Any], where: str) -> tuple[MigProfile, ...]:
    raw = _get(item, "migProfiles", list, where)
    if not raw:
        return ()
    return decode_mig_profiles(raw, where)


def decode_mig_profiles(raw: object, where: str) -> tuple[MigProfile, ...]:
    """HAMi's ``migProfiles`` array (already parsed JSON/YAML) as ``MigProfile`` values.

    Raises:
        AnnotationError: not an array of objects of the shape above; names ``where``.
    """
    if not isinstance(raw, list):
        raise AnnotationError(f"{where}: migProfiles must be an array")
    out = []
    for i, p in enumerate(raw):
        at = f"{where}: migProfiles[{i}]"
        if not isinstance(p, dict):
            raise AnnotationError(f"{at}: expected an object")
        places: Any = p.get("placements") or next(
            (v for k, v in p.items() if k.lower() == "placements"), []
        )
        if not isinstance(places, list) or not all(isinstance(x, dict) for x in places):
            raise AnnotationError(f"{at}: placements must be an array of objects")
        try:
            out.append(
                MigProfile(
                    name=_get(p, "name", str, at),
                    memory_mib=_get(p, "memoryMB", int, at),
                    cores_pct=_get(p, "core", int, at),
                    slice_count=_get(p, "sliceCount", int, at),
                    placements=tuple(
                        MigPlacement(start=_get(x, "start", int, at), size=_get(x, "size", int, at))
                        for x in places
                    ),
                )
            )
        except ValueError as exc:
            raise AnnotationError(f"{at}: {exc}") from None
    return tuple(out)


def encode_inventory_legacy(devices: tuple[DeviceInfo, ...] | list[DeviceInfo]) -> str:
    """Encode devices in the legacy 9-field colon/comma form (for tests and old readers)."""
    return "".join(
        f"{d.uuid},{d.split_count},{d.memory_mib},{d.cores_pct},{d.model},{d.numa},"
        f"{'true' if d.healthy else 'false'},{d.index},{d.mode}:"
        for d in devices
    )


def decode_inventory(value: str, *, node: str, vendor: str) -> tuple[DeviceInfo, ...]:
    """Decode a node inventory annotation, JSON first, else the legacy form.

    Args:
        value: the annotation value.
        node: the node name, for error messages.
        vendor: the vendor key of the annotation (the wire form does not carry it).

    Returns:
        The devices in annotation order.

    Raises:
        AnnotationError: malformed value; the message names the node, the device
            position and the problem. Callers mark that node unregistered; they do not
            stop serving.
    """
    text = value.strip()
    if text.startswith(("[", "{")):
        return _decode_json(text, node=node, vendor=vendor)
    return _decode_legacy(text, node=node, vendor=vendor)


def _decode_json(text: str, *, node: str, vendor: str) -> tuple[DeviceInfo, ...]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AnnotationError(f"node {node}: inventory is not valid JSON: {exc}") from exc
    if not isinstance(items, list):
        raise AnnotationError(f"node {node}: inventory must be a JSON array")
    devices = []
    for pos, item in enumerate(items):
        where = f"node {node}: inventory device #{pos}"
        if not isinstance(item, dict):
            raise AnnotationError(f"{where}: expected an object, got {type(item).__name__}")
        # Unknown keys are ignored: HAMi adds fields (customInfo, ...) across releases.
        uuid = _get(item, "id", str, where)
        if not uuid:
            raise AnnotationError(f"{where}: missing device id")
        devices.append(
            _device(
                where,
                uuid=uuid,
                vendor=vendor,
                model=_get(item, "type", str, where),
                index=_get(item, "index", int, where),
                split_count=_get(item, "count", int, where),
                memory_mib=_get(item, "devmem", int, where),
                cores_pct=_get(item, "devcore", int, where),
                numa=_get(item, "numa", int, where),
                mode=_get(item, "mode", str, where) or "hami-core",
                healthy=_get(item, "health", bool, where),
                mig_profiles=_decode_profiles(item, where),
            )
        )
    return tuple(devices)


def _get(item: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key in item:
        value = item[key]
    else:  # Go's encoding/json: an exact match first, else a case-insensitive one
        value = next((v for k, v in item.items() if k.lower() == key.lower()), None)
    if value is None:
        return kind()
    # bool is an int in Python; a JSON true where a number belongs is still wrong.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise AnnotationError(f"{where}: {key} must be {kind.__name__}, got {value!r}")
    return value


#: Go's ``strconv.ParseBool`` tokens, which HAMi's legacy decoder reads ``health`` with.
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _decode_legacy(text: str, *, node: str, vendor: str) -> tuple[DeviceInfo, ...]:
    """HAMi's ``DecodeNodeDevices`` form (``pkg/device/devices.go``): every device ends
    with ``:`` (a value without one is refused), empty segments are skipped (``":"`` is
    no device), ``health`` is a Go boolean. Where HAMi gives every 7-field device index
    0, a device's position on the line is its index here."""
    if ":" not in text:
        raise AnnotationError(
            f"node {node}: inventory misses the device separator ':' (legacy form: "
            "id,count,devmem,devcore,type,numa,health[,index,mode] per device, each ending "
            "with ':')"
        )
    devices = []
    for pos, entry in enumerate(e for e in text.split(":") if e):
        where = f"node {node}: inventory device #{pos}"
        fields = entry.split(",")
        if len(fields) not in (7, 9):
            raise AnnotationError(
                f"{where}: legacy entry {entry!r} has {len(fields)} fields, expected 7 or 9"
            )
        health = fields[6].strip()
        if health not in _GO_TRUE | _GO_FALSE:
            raise AnnotationError(f"{where}: health must be true or false, got {fields[6]!r}")
        devices.append(
            _device(
                where,
                uuid=fields[0],
                vendor=vendor,
                split_count=_int(fields[1], "count", where),
                memory_mib=_int(fields[2], "devmem", where),
                cores_pct=_int(fields[3], "devcore", where),
                model=fields[4],
                numa=_int(fields[5], "numa", where),
                healthy=health in _GO_TRUE,
                index=_int(fields[7], "index", where) if len(fields) == 9 else pos,
                mode=(fields[8] if len(fields) == 9 else "") or "hami-core",
            )
        )
    return tuple(devices)


def _int(text: str, key: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise AnnotationError(f"{where}: {key} must be an integer, got {text!r}") from None


def _device(where: str, **fields: Any) -> DeviceInfo:
    if not fields["uuid"]:
        raise AnnotationError(f"{where}: missing device id")
    if any(sep in fields["uuid"] for sep in ",:;"):
        # The id is written into pods' device lists, where these characters separate fields.
        raise AnnotationError(
            f"{where}: device id {fields['uuid']!r} contains ',', ':' or ';', "
            "which a pod's device list cannot carry"
        )
    mode = fields["mode"]
    if mode not in DEVICE_MODES and not _MODE_TOKEN.fullmatch(mode):
        # Other vendors' plugins may write their own mode (kept, as HAMi keeps it); it is
        # written back into device lists and metrics, so it must stay a plain token.
        raise AnnotationError(
            f"{where}: mode {mode!r} is not one of {', '.join(DEVICE_MODES)} nor a plain "
            "token (letters, digits, '-', '_', '.'; at most 63)"
        )
    try:
        return DeviceInfo(**fields)
    except (ValueError, TypeError) as exc:
        raise AnnotationError(f"{where}: {exc}") from exc
