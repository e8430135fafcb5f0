"""Admission helpers: a vendor's ``hami_mutate`` logic answers bad input with a denial."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec

from hami_core.errors import InvalidInputError
from hami_core.model import MutateResult

P = ParamSpec("P")


def denies_invalid_input(
    mutate: Callable[P, MutateResult | None],
) -> Callable[P, MutateResult | None]:
    """Decorate a vendor's admission function so that an ``InvalidInputError`` it raises
    (``read_quantity``'s message naming the container, the resource and the value, or
    the vendor's own rule) comes back as ``MutateResult(denial=<that message>)``: the
    webhook denies the pod with it (PROTOCOL.md §6) instead of failing the review.

    Any other exception passes through (a bug, reported by the manager naming the
    backend). Arguments and the other answers (a ``MutateResult``, ``None`` for a
    container that asks nothing of the vendor) are the decorated function's.
    """

    @functools.wraps(mutate)
    def admit(*args: P.args, **kwargs: P.kwargs) -> MutateResult | None:
        try:
            return mutate(*args, **kwargs)
        except InvalidInputError as exc:
            return MutateResult(denial=str(exc))

    return admit
