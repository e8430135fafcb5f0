import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_core.errors import AnnotationError
from hami_core.protocol import (
    HandshakeState,
    decode_handshake,
    decode_link_scores,
    decode_lock,
    encode_handshake,
    encode_link_scores,
    encode_lock,
)

T0 = dt.datetime(2026, 11, 29, 9, 0, 0, tzinfo=dt.UTC)


def test_lock_format():
    assert encode_lock(T0, "default", "train-0") == "2026-11-29T09:00:00Z,default,train-0"
    lock = decode_lock("2026-11-29T09:00:00Z,default,train-0")
    assert lock.acquired_at == T0 and lock.namespace == "default" and lock.pod == "train-0"


def test_lock_owner_is_exact_never_prefix():
    lock = decode_lock("2026-11-29T09:00:00Z,default,train-0")
    assert lock.owned_by("default", "train-0")
    assert not lock.owned_by("default", "train")
    assert not lock.owned_by("default", "train-01")
    assert not lock.owned_by("prod", "train-0")


def test_lock_offset_and_legacy_time_only():
    assert decode_lock("2026-11-29T17:00:00+08:00,a,b").acquired_at == T0
    legacy = decode_lock("2026-11-29T09:00:00Z")
    assert legacy.acquired_at == T0 and not legacy.owned_by("", "")


def test_lock_expiry():
    lock = decode_lock(encode_lock(T0, "ns", "p"))
    assert not lock.expired(T0 + dt.timedelta(seconds=300))
    assert lock.expired(T0 + dt.timedelta(seconds=301))
    assert lock.expired(T0 + dt.timedelta(seconds=11), expiry_s=10)


@pytest.mark.parametrize(
    "value",
    [
        "yesterday,ns,p",
        "2026-11-29T09:00:00Z,ns",
        "2026-11-29T09:00:00,ns,p",
        "2026-11-29T09:00:00Z,,p",
    ],
)
def test_lock_malformed(value):
    with pytest.raises(AnnotationError, match="node lock"):
        decode_lock(value)


def test_lock_encode_refuses_naive_and_commas():
    with pytest.raises(ValueError):
        encode_lock(dt.datetime(2026, 1, 1), "a", "b")
    with pytest.raises(ValueError):
        encode_lock(T0, "a,b", "c")


@given(
    st.datetimes(
        min_value=dt.datetime(2000, 1, 1),
        max_value=dt.datetime(2100, 1, 1),
        timezones=st.just(dt.UTC),
    ),
    st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}", fullmatch=True),
    st.from_regex(r"[a-z0-9][a-z0-9.-]{0,30}", fullmatch=True),
)
def test_lock_round_trip(at, ns, pod):
    at = at.replace(microsecond=0)
    lock = decode_lock(encode_lock(at, ns, pod))
    assert (lock.acquired_at, lock.namespace, lock.pod) == (at, ns, pod)


def test_handshake_is_utc():
    local = dt.datetime(2026, 11, 29, 17, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=8)))
    assert encode_handshake(HandshakeState.REQUESTING, local) == "Requesting_2026-11-29 09:00:00"
    hs = decode_handshake("Requesting_2026-11-29 09:00:00")
    assert hs.state is HandshakeState.REQUESTING and hs.at == T0
    assert decode_handshake("Reported_2026-11-29 09:00:00").state is HandshakeState.REPORTED
    assert decode_handshake("Deleted_2026-11-29 09:00:00").state is HandshakeState.DELETED


def test_handshake_staleness():
    hs = decode_handshake("Requesting_2026-11-29 09:00:00")
    assert not hs.stale(T0 + dt.timedelta(seconds=60))
    assert hs.stale(T0 + dt.timedelta(seconds=61))
    assert not decode_handshake("Reported_2026-11-29 09:00:00").stale(T0 + dt.timedelta(hours=1))


@pytest.mark.parametrize(
    "value",
    ["Requesting", "Asking_2026-11-29 09:00:00", "Requesting_2026-11-29T09:00:00Z", "Requesting_"],
)
def test_handshake_malformed(value):
    with pytest.raises(AnnotationError, match="handshake"):
        decode_handshake(value)


@given(
    st.sampled_from(list(HandshakeState)),
    st.datetimes(
        min_value=dt.datetime(2000, 1, 1),
        max_value=dt.datetime(2100, 1, 1),
        timezones=st.just(dt.UTC),
    ),
)
def test_handshake_round_trip(state, at):
    at = at.replace(microsecond=0)
    hs = decode_handshake(encode_handshake(state, at))
    assert (hs.state, hs.at) == (state, at)


def test_link_scores_protocol_shape_and_symmetry():
    value = '[{"uuid": "GPU-a", "score": {"GPU-b": 200, "GPU-c": 10}}, {"uuid": "GPU-b", "score": {"GPU-a": 200}}]'
    scores = decode_link_scores(value, node="n1")
    assert scores["GPU-a"]["GPU-b"] == 200 and scores["GPU-b"]["GPU-a"] == 200
    assert scores["GPU-c"]["GPU-a"] == 10
    assert decode_link_scores(encode_link_scores(scores), node="n1") == scores


def test_negative_link_scores_are_scores_and_one_sided_pairs_keep_theirs():
    """HAMi's ``TestFit_TopologyNegativeScores`` values; a pair listed on one side only
    keeps its negative score (a missing other side is not a 0 that wins)."""
    value = '[{"uuid": "a", "score": {"b": -5, "c": -3}}, {"uuid": "b", "score": {"a": -5}}]'
    scores = decode_link_scores(value, node="n1")
    assert scores == {"a": {"b": -5, "c": -3}, "b": {"a": -5}, "c": {"a": -3}}
    assert decode_link_scores(encode_link_scores(scores), node="n1") == scores


@pytest.mark.parametrize(
    "value",
    [
        "{",
        "{}",
        '[{"score":{}}]',
        '[{"uuid":"a","score":{"b":"x"}}]',
        '[{"uuid":"a","score":[1]}]',
        '[{"uuid":"a","score":{"b":9223372036854775808}}]',
        '[{"uuid":"a","score":{"b":1.5}}]',
        '[{"uuid":"a","score":{"b":true}}]',
    ],
)
def test_link_scores_malformed(value):
    with pytest.raises(AnnotationError, match="node n1"):
        decode_link_scores(value, node="n1")
