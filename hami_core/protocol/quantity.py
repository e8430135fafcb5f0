"""Kubernetes resource quantities to exact integers.

Source of the grammar: Kubernetes ``resource.Quantity`` (apimachinery
``pkg/api/resource``), parsed by the official client's ``parse_quantity``.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
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


def _to_decimal(value: int | str | float | Decimal, *, resource: str) -> Decimal:
    if isinstance(value, int):
        return Decimal(value)
    # Imported here: the client package is heavy and only this function needs it.
    from kubernetes.utils.quantity import parse_quantity

    try:
        parsed = parse_quantity(value)  # type: ignore[no-untyped-call]
    except (ValueError, InvalidOperation, TypeError) as exc:
        raise QuantityError(f"{resource}: {value!r} is not a Kubernetes quantity") from exc
    if not isinstance(parsed, Decimal) or not parsed.is_finite():
        raise QuantityError(f"{resource}: {value!r} is not a Kubernetes quantity")
    return parsed
