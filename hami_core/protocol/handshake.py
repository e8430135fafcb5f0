"""Node handshake value (PROTOCOL.md §2): ``<State>_<YYYY-MM-DD HH:MM:SS>``, in UTC.

The scheduler writes ``Requesting_<time>``; the device plugin answers ``Reported_<time>``;
``Deleted_<time>`` marks a vendor removed from the node. HAMi writes local time (a known
defect); we write and read UTC.
"""

from __future__ import annotations

import datetime as dt
import enum

import attrs

from hami_core.errors import AnnotationError

_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
#: A node still ``Requesting_`` after this long, with no devices allocatable, is unhealthy.
HANDSHAKE_TIMEOUT_S = 60.0


class HandshakeState(enum.StrEnum):
    REQUESTING = "Requesting"
    REPORTED = "Reported"
    DELETED = "Deleted"


@attrs.frozen(kw_only=True)
class Handshake:
    """A decoded handshake: state and timezone-aware UTC time."""

    state: HandshakeState
    at: dt.datetime

    def stale(self, now: dt.datetime, *, timeout_s: float = HANDSHAKE_TIMEOUT_S) -> bool:
        """True when a ``Requesting`` handshake has gone unanswered for ``timeout_s``."""
        return (
            self.state is HandshakeState.REQUESTING and (now - self.at).total_seconds() > timeout_s
        )


def encode_handshake(state: HandshakeState, at: dt.datetime) -> str:
    """Encode, e.g. ``Requesting_2026-11-29 09:00:00``; ``at`` must be timezone-aware."""
    if at.tzinfo is None:
        raise ValueError("at must be timezone-aware")
    return f"{state.value}_{at.astimezone(dt.UTC).strftime(_TIME_FORMAT)}"


def decode_handshake(value: str) -> Handshake:
    """Decode a handshake value; its time is read as UTC.

    Raises:
        AnnotationError: unknown state or malformed time.
    """
    state_text, sep, time_text = value.partition("_")
    if not sep:
        raise AnnotationError(f"handshake {value!r}: expected '<State>_<time>'")
    try:
        state = HandshakeState(state_text)
    except ValueError:
        known = ", ".join(s.value for s in HandshakeState)
        raise AnnotationError(f"handshake {value!r}: state must be one of {known}") from None
    try:
        at = dt.datetime.strptime(time_text, _TIME_FORMAT).replace(tzinfo=dt.UTC)
    except ValueError:
        raise AnnotationError(
            f"handshake {value!r}: time must look like 2026-11-29 09:00:00"
        ) from None
    return Handshake(state=state, at=at)


def podresources_key(handshake_key: str) -> str:
    """The capability annotation beside a vendor's handshake key (PROTOCOL.md §4):
    ``hami.io/node-handshake`` -> ``hami.io/node-podresources``,
    ``hami.io/node-handshake-dcu`` -> ``hami.io/node-podresources-dcu``; a key without
    ``node-handshake`` gets ``-podresources`` appended to its name."""
    if "node-handshake" in handshake_key:
        return handshake_key.replace("node-handshake", "node-podresources", 1)
    return f"{handshake_key}-podresources"


def identifies_pods(capability: str | None, handshake: str | None) -> bool:
    """True when the node's device plugin of a vendor tells kubelet's pods apart through
    kubelet's PodResources API (PROTOCOL.md §4), so a bind there needs no node lock.

    Our device plugin writes ``capability`` (``podresources_key``) in the same patch as
    each handshake answer, with the answer's exact value. It holds while the handshake
    is that answer, or a ``Requesting_`` asked no more than ``HANDSHAKE_TIMEOUT_S`` after
    it (the next round, not answered yet). Another device plugin's answer (HAMi's, which
    knows nothing of it) differs, so the capability lapses at its first answer; a
    missing or unreadable value is no capability.
    """
    if not capability or not handshake:
        return False
    try:
        said = decode_handshake(capability)
        now = decode_handshake(handshake)
    except AnnotationError:
        return False
    if said.state is not HandshakeState.REPORTED:
        return False
    if now.state is HandshakeState.REPORTED:
        return handshake == capability
    if now.state is HandshakeState.REQUESTING:
        # -5 s: the scheduler's clock may run a little behind the node's.
        return -5.0 <= (now.at - said.at).total_seconds() <= HANDSHAKE_TIMEOUT_S
    return False
