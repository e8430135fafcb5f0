"""Node lock value (PROTOCOL.md §4): ``<RFC3339 time>,<namespace>,<pod name>``."""

from __future__ import annotations

import datetime as dt

import attrs

from hami_core.errors import AnnotationError

#: Default lock lifetime: HAMi's 5 minutes.
DEFAULT_LOCK_EXPIRY_S = 300.0
#: How far a bound pod's ``hami.io/bind-time`` may be from its lock's stamp for the lock
#: to be that bind's (HAMi's scheduler takes the two from separate clock reads; ours
#: writes the lock's own stamp).
BIND_TIME_SLACK_S = 60


@attrs.frozen(kw_only=True)
class NodeLock:
    """A decoded node lock.

    Attributes:
        acquired_at: when it was taken, timezone-aware UTC.
        namespace: the owner pod's namespace ("" in HAMi's old time-only form).
        pod: the owner pod's name ("" in the old form).
    """

    acquired_at: dt.datetime
    namespace: str = ""
    pod: str = ""

    def owned_by(self, namespace: str, pod: str) -> bool:
        """Exact owner match (never a prefix match)."""
        return bool(self.pod) and self.namespace == namespace and self.pod == pod

    def expired(
        self, now: dt.datetime, *, expiry_s: float = DEFAULT_LOCK_EXPIRY_S, skew_s: float = 5.0
    ) -> bool:
        """True when the lock is older than ``expiry_s`` seconds at ``now``, or stamped
        more than ``skew_s`` in the future (such a stamp is not trusted)."""
        age = (now - self.acquired_at).total_seconds()
        return age > expiry_s or age < -skew_s


def encode_lock(acquired_at: dt.datetime, namespace: str, pod: str) -> str:
    """Encode a lock; ``acquired_at`` must be timezone-aware, written in UTC.

    Example: ``2026-11-29T09:00:00Z,default,train-0``.
    """
    if acquired_at.tzinfo is None:
        raise ValueError("acquired_at must be timezone-aware")
    for part in (namespace, pod):
        if "," in part or not part:
            raise ValueError(f"invalid lock owner part {part!r}")
    stamp = acquired_at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{stamp},{namespace},{pod}"


def decode_lock(value: str) -> NodeLock:
    """Decode a lock value; also accepts HAMi's older time-only value.

    Raises:
        AnnotationError: the time is not RFC 3339 or the owner part is malformed.
    """
    parts = value.split(",")
    if len(parts) not in (1, 3):
        raise AnnotationError(f"node lock {value!r}: expected '<time>,<namespace>,<pod>'")
    try:
        at = dt.datetime.fromisoformat(parts[0].strip())
    except ValueError:
        raise AnnotationError(
            f"node lock {value!r}: {parts[0]!r} is not an RFC 3339 time"
        ) from None
    if at.tzinfo is None:
        raise AnnotationError(f"node lock {value!r}: time has no UTC offset")
    if len(parts) == 1:
        return NodeLock(acquired_at=at.astimezone(dt.UTC))
    if not parts[1] or not parts[2]:
        raise AnnotationError(f"node lock {value!r}: empty namespace or pod name")
    return NodeLock(acquired_at=at.astimezone(dt.UTC), namespace=parts[1], pod=parts[2])


def taken_for_bind(lock: NodeLock, bind_time: str | None) -> bool | None:
    """Whether ``lock`` was taken for the bind that wrote ``bind_time`` (the owner pod's
    ``hami.io/bind-time``, unix seconds, written by the scheduler with the Binding): the
    two stamps at most ``BIND_TIME_SLACK_S`` apart. None when ``bind_time`` is missing or
    unreadable (nothing to tell by). A lock stamped long after its owner was bound (a
    retried bind that re-took it) is not that bind's: no device plugin serves the pod
    under it (``deviceplugin.pending``) and it protects nothing."""
    try:
        stamp = int(bind_time or "")
    except ValueError:
        return None
    return abs(stamp - lock.acquired_at.timestamp()) <= BIND_TIME_SLACK_S
