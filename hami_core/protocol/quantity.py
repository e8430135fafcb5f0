"""Kubernetes resource quantities to exact integers.

Source of the grammar: Kubernetes ``resource.Quantity`` (apimachinery
``pkg/api/resource/quantity.go``, the grammar in its doc comment, and the suffixes
``ParseQuantity`` accepts: n, u, m, k, M, G, T, P, E and Ki..Ei). Parsed here rather than
with the kubernetes client so that the core needs no Kubernetes client (``hami simulate``
runs without it); tests check the result against the client's ``parse_quantity``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation, localcontext
from typing import Final

from hami_core.errors import QuantityError

#: Largest value accepted for a device quantity. HAMi keeps per-device memory (MiB) and
#: cores in int32, so anything above this would wrap there; we reject it instead.
INT32_MAX: Final = 2**31 - 1


def parse_quantity_int(
    value: object, *, resource: str, maximum: int = INT32_MAX, unit: str = ""
) -> int:
    """Parse a Kubernetes quantity that must be a whole, non-negative number.

    Args:
        value: the quantity as it appears in a pod spec (``"5k"``, ``"16Gi"``, ``3``).
        resource: the resource name, used in error messages.
        maximum: the largest accepted value (default: int32, as HAMi stores it).
        unit: what one counts, for messages (``"MiB"`` for a memory resource).

    Returns:
        The exact integer (``"5k"`` -> 5000, ``"1Ki"`` -> 1024).

    Raises:
        QuantityError: the value is not a quantity, is fractional (``"1500m"`` for a
            count), negative, or above ``maximum`` (``"16Gi"`` as MiB); the message
            names the resource and the value.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str, float, Decimal)):
        raise QuantityError(f"{resource}: {value!r} is not a quantity")
    number = _to_decimal(value, resource=resource)
    if number != number.to_integral_value():
        raise QuantityError(f"{resource}: {value!r} is not a whole number ({number.normalize()})")
    if number < 0:
        raise QuantityError(f"{resource}: {value!r} is negative")
    suffix = unit if unit in ("", "%") else f" {unit}"
    if number > maximum:
        # Huge exponents (1e9999) must not be expanded into digits just to be reported.
        shown = f"{number:.4g}" if number.adjusted() > 30 else str(int(number))
        equals = "" if shown == str(value).strip() else f" = {shown}{suffix}"
        raise QuantityError(
            f"{resource}: {value!r}{equals} is above the largest accepted value {maximum}{suffix}"
        )
    return int(number)


#: ``<signedNumber><suffix>`` of apimachinery's grammar; the suffix is a binary SI
#: prefix (Ki = 1024 .. Ei = 1024**6), a decimal SI prefix (n = 1e-9 .. E = 1e18) or a
#: decimal exponent (``e3``, ``E-2``).
_QUANTITY: Final = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<si>[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?"
)
_BINARY: Final[dict[str, int]] = {p: 1 << (10 * (i + 1)) for i, p in enumerate("KMGTPE")}
_DECIMAL_SI: Final = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(value: str) -> Decimal:
    """The exact value of a Kubernetes quantity string (``"16Gi"``, ``"1500m"``, ``"1e3"``).

    Raises:
        ValueError: ``value`` does not follow the Quantity grammar (leading or trailing
            spaces, ``"1_000"``, ``"NaN"``, ``"1K"`` and unknown suffixes are rejected, as
            apimachinery's ``ParseQuantity`` rejects them).
    """
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    with localcontext() as ctx:
        # Exact arithmetic: the number's digits plus any exponent, never rounded.
        ctx.prec = 1_000_000
        ctx.Emax, ctx.Emin = 10**9, -(10**9)
        number = Decimal(match["number"])
        if match["binary"]:
            return number * _BINARY[match["binary"][0]]
        if match["si"]:
            return number.scaleb(_DECIMAL_SI[match["si"]])
        if match["exp"]:
            exponent = int(match["exp"])
            if abs(exponent) > 10**5:  # keeps results inside Decimal's default context
                raise ValueError(f"{value!r}: exponent out of range")
            return number.scaleb(exponent)
        return number


def _to_decimal(value: int | str | float | Decimal, *, resource: str) -> Decimal:
    if isinstance(value, int):
        return Decimal(value)
    try:
        parsed = parse_quantity(value) if isinstance(value, str) else Decimal(value)
    except (ValueError, InvalidOperation) as exc:
        raise QuantityError(f"{resource}: {value!r} is not a Kubernetes quantity") from exc
    if not parsed.is_finite():
        raise QuantityError(f"{resource}: {value!r} is not a Kubernetes quantity")
    return parsed


def parse_quantity_exact(value: object, *, resource: str) -> Decimal:
    """Parse any Kubernetes quantity (``"500m"``, ``"2Gi"``, ``4``) to an exact Decimal.

    Raises:
        QuantityError: not a quantity, or negative; the message names the resource.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str, float, Decimal)):
        raise QuantityError(f"{resource}: {value!r} is not a quantity")
    number = _to_decimal(value, resource=resource)
    if number < 0:
        raise QuantityError(f"{resource}: {value!r} is negative")
    return number
