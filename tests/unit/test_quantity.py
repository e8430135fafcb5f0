from decimal import Decimal, localcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_core.errors import QuantityError
from hami_core.protocol import INT32_MAX, parse_quantity_int


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("5k", 5000),
        ("1Ki", 1024),
        ("3", 3),
        (3, 3),
        ("0", 0),
        ("2M", 2_000_000),
        ("1e3", 1000),
        ("1000m", 1),
        (Decimal("7"), 7),
    ],
)
def test_exact_integers(value, expected):
    assert parse_quantity_int(value, resource="nvidia.com/gpumem") == expected


def test_fractional_count_is_an_error_naming_the_resource():
    with pytest.raises(
        QuantityError, match=r"nvidia.com/gpu: '1500m' is not a whole number \(1.5\)"
    ):
        parse_quantity_int("1500m", resource="nvidia.com/gpu")


def test_mib_over_int32_is_rejected_not_wrapped():
    with pytest.raises(
        QuantityError,
        match=r"nvidia.com/gpumem: '16Gi' = 17179869184 MiB is above the largest accepted value 2147483647 MiB",
    ):
        parse_quantity_int("16Gi", resource="nvidia.com/gpumem", unit="MiB")
    assert parse_quantity_int(str(INT32_MAX), resource="r") == INT32_MAX
    with pytest.raises(QuantityError):
        parse_quantity_int(str(INT32_MAX + 1), resource="r")
    with pytest.raises(QuantityError):
        parse_quantity_int(2**31, resource="r")


@pytest.mark.parametrize("value", ["abc", "-1", "", "1.5", None, True, [1], {"a": 1}, "1 2"])
def test_malformed(value):
    with pytest.raises(QuantityError, match="nvidia.com/gpucores"):
        parse_quantity_int(value, resource="nvidia.com/gpucores")


def test_custom_maximum():
    assert parse_quantity_int("100", resource="p", maximum=100) == 100
    with pytest.raises(QuantityError, match="above the largest accepted value 100"):
        parse_quantity_int("101", resource="p", maximum=100)


@given(st.integers(min_value=0, max_value=INT32_MAX))
def test_plain_integers_round_trip(n):
    assert parse_quantity_int(str(n), resource="r") == n
    assert parse_quantity_int(n, resource="r") == n


@given(
    st.integers(min_value=0, max_value=2**21 - 1),
    st.sampled_from([("Ki", 1024), ("k", 1000), ("Mi", 2**20)]),
)
def test_suffixes(n, suffix):
    text, factor = suffix
    assert parse_quantity_int(f"{n}{text}", resource="r", maximum=2**63) == n * factor


def test_huge_exponents_are_reported_without_expanding_them():
    with pytest.raises(QuantityError, match=r"'1e9999' = 1e\+9999 is above"):
        parse_quantity_int("1e9999", resource="r")


# The core parses quantities itself (no Kubernetes client needed for `hami simulate`):
# it must agree with the official client on every string of apimachinery's grammar, and
# reject what ParseQuantity rejects.
_NUMBERS = st.from_regex(r"\A[+-]?(?:[0-9]{1,12}(?:\.[0-9]{0,6})?|\.[0-9]{1,6})\Z")
_SUFFIXES = st.sampled_from(
    ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
    + [f"e{n}" for n in range(-12, 13)]
    + ["E3", "e+2", "E-4"]
)


@settings(deadline=None)
@given(_NUMBERS, _SUFFIXES)
def test_agrees_with_the_kubernetes_client(number, suffix):
    client = pytest.importorskip("kubernetes.utils.quantity")  # in the dev install
    from hami_core.protocol.quantity import parse_quantity

    text = number + suffix
    # The client computes in the current decimal context (28 digits by default, so
    # "10000000001Ei" rounds); ours is exact. Compare at a precision where both are.
    with localcontext(prec=100):
        expected = client.parse_quantity(text)
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "value",
    ["1K", "1_000", " 1", "1 ", "NaN", "Infinity", "1ki", "1mi", "1.5.3", "e3", "1e", "0x10"],
)
def test_strings_outside_the_grammar_are_rejected(value):
    from hami_core.protocol.quantity import parse_quantity

    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(value)
    with pytest.raises(QuantityError, match="r: "):
        parse_quantity_int(value, resource="r")


def test_exponents_beyond_range_are_rejected_not_computed():
    with pytest.raises(QuantityError, match="not a Kubernetes quantity"):
        parse_quantity_int("1e999999999", resource="r")
