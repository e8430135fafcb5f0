"""Wire codecs of the HAMi protocol (PROTOCOL.md), quantities and the config file."""

from .config import HamiConfig, VendorConfig, load_config, parse_config
from .devicelist import (
    decode_container_devices,
    decode_pod_devices,
    encode_container_devices,
    encode_pod_devices,
)
from .handshake import Handshake, HandshakeState, decode_handshake, encode_handshake
from .inventory import decode_inventory, encode_inventory, encode_inventory_legacy
from .lock import NodeLock, decode_lock, encode_lock
from .quantity import INT32_MAX, parse_quantity_int
from .topology import decode_link_scores, encode_link_scores

__all__ = [
    "INT32_MAX",
    "Handshake",
    "HandshakeState",
    "HamiConfig",
    "NodeLock",
    "VendorConfig",
    "decode_container_devices",
    "decode_handshake",
    "decode_inventory",
    "decode_link_scores",
    "decode_lock",
    "decode_pod_devices",
    "encode_container_devices",
    "encode_handshake",
    "encode_inventory",
    "encode_inventory_legacy",
    "encode_link_scores",
    "encode_lock",
    "encode_pod_devices",
    "load_config",
    "parse_config",
    "parse_quantity_int",
]
