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
