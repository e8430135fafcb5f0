"""HAMi's naming pattern of a vendor key's annotation keys, and a backend's own version.

HAMi 2.10 names the four annotation keys of a vendor from two words (PROTOCOL.md §2-3,
``pkg/device/<vendor>/device.go`` of each vendor): the node word in the inventory and
handshake keys (``RegisterAnnos`` / ``HandshakeAnnos``), the pod word (HAMi's
``commonWord``, or a vendor's own word) in the device lists written at bind
(``InRequestDevices`` / ``SupportDevices``). ``hami_annotation_keys`` states that pattern
once; a backend whose keys do not follow it (NVIDIA's handshake key has no word) writes its
four keys out.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TypedDict

#: What ``package_version`` answers for a module imported from a source tree that was
#: never installed (no distribution metadata).
UNKNOWN_VERSION = "0.0.0+unknown"


class AnnotationKeys(TypedDict):
    """The four annotation keys of one vendor key, named as ``DeviceTypeInfo``'s fields,
    so that ``DeviceTypeInfo(vendor=..., resources=..., **keys)`` takes them."""

    register_annotation: str
    handshake_annotation: str
    to_allocate_annotation: str
    allocated_annotation: str


def hami_annotation_keys(
    node_word: str, pod_word: str | None = None, *, register_word_last: bool = False
) -> AnnotationKeys:
    """The annotation keys HAMi derives from a vendor's words.

    Args:
        node_word: the word of the node keys: inventory ``hami.io/node-<w>-register``,
            handshake ``hami.io/node-handshake-<w>`` (AMD: ``amd``; Hygon: ``dcu``).
        pod_word: the word of the pod keys ``hami.io/<p>-devices-to-allocate`` /
            ``hami.io/<p>-devices-allocated``; None: ``node_word`` (Cambricon:
            ``cambricon-mlu`` with node word ``mlu``; Biren: ``Biren`` with ``biren``).
        register_word_last: the inventory key is ``hami.io/node-register-<w>`` (HAMi's
            Ascend and Kunlunxin: ``hami.io/node-register-Ascend910B3``,
            ``hami.io/node-register-xpu``).

    Returns:
        The four keys; ``hami_annotation_keys("mlu", "cambricon-mlu")`` is
        ``hami.io/node-mlu-register``, ``hami.io/node-handshake-mlu``,
        ``hami.io/cambricon-mlu-devices-to-allocate``,
        ``hami.io/cambricon-mlu-devices-allocated``.
    """
    pod = node_word if pod_word is None else pod_word
    register = f"register-{node_word}" if register_word_last else f"{node_word}-register"
    return AnnotationKeys(
        register_annotation=f"hami.io/node-{register}",
        handshake_annotation=f"hami.io/node-handshake-{node_word}",
        to_allocate_annotation=f"hami.io/{pod}-devices-to-allocate",
        allocated_annotation=f"hami.io/{pod}-devices-allocated",
    )


def uuid_filter_keys(domain: str) -> tuple[str, str]:
    """HAMi's UUID filter pod annotations of a vendor's resource domain, ``(use, nouse)``:
    ``<domain>/use-gpuuuid`` and ``<domain>/nouse-gpuuuid`` (comma lists of the device
    UUIDs the pod may / must not use; HAMi 2.10 ``pkg/device/<vendor>/device.go`` of
    Hygon, Cambricon, Enflame, MetaX, Biren, Vastai: ``uuid_filter_keys("hygon.com")`` is
    ``("hygon.com/use-gpuuuid", "hygon.com/nouse-gpuuuid")``)."""
    return f"{domain}/use-gpuuuid", f"{domain}/nouse-gpuuuid"


def type_filter_keys(domain: str, word: str) -> tuple[str, str]:
    """HAMi's device-type filter pod annotations, ``(use, nouse)``: ``<domain>/use-<w>type``
    and ``<domain>/nouse-<w>type`` (comma lists of model tokens; HAMi 2.10:
    ``type_filter_keys("hygon.com", "dcu")`` is ``("hygon.com/use-dcutype",
    "hygon.com/nouse-dcutype")``, AMD's ``amd.com/use-gputype``)."""
    return f"{domain}/use-{word}type", f"{domain}/nouse-{word}type"


def package_version(distribution: str) -> str:
    """The installed version of ``distribution`` (a backend's ``__version__``, e.g.
    ``package_version("hami-amd")`` is ``"0.1.0"``), from its metadata
    (``importlib.metadata``); ``UNKNOWN_VERSION`` when it is not installed (a source tree
    on ``sys.path``)."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return UNKNOWN_VERSION


__all__ = [
    "UNKNOWN_VERSION",
    "AnnotationKeys",
    "hami_annotation_keys",
    "package_version",
    "type_filter_keys",
    "uuid_filter_keys",
]
