"""The kit's admission helpers: ``denies_invalid_input`` and ``stated_quantities``."""

from __future__ import annotations

import pytest

from hami_core.backend import (
    InvalidInputError,
    MutateResult,
    denies_invalid_input,
    read_quantity,
    stated_quantities,
)


@denies_invalid_input
def _mutate(container: dict[str, object]) -> MutateResult | None:
    count = read_quantity(container, "v.com/n")
    if count is None:
        return None
    if count > 4:
        raise InvalidInputError(f"container {container['name']!r}: v.com/n {count} is above 4")
    return MutateResult(resources={"v.com/n": count})


def test_an_invalid_quantity_becomes_a_denial_naming_container_resource_and_value():
    bad = _mutate({"name": "main", "resources": {"limits": {"v.com/n": "1.5"}}})
    assert bad is not None and bad.denial is not None
    assert "'main'" in bad.denial and "v.com/n" in bad.denial and "1.5" in bad.denial
    assert bad.resources == {}
    rule = _mutate({"name": "side", "resources": {"limits": {"v.com/n": "9"}}})
    assert rule == MutateResult(denial="container 'side': v.com/n 9 is above 4")


def test_the_decorated_answers_pass_through_and_other_errors_are_not_swallowed():
    assert _mutate({"name": "main"}) is None
    assert _mutate({"name": "main", "resources": {"limits": {"v.com/n": "2"}}}) == MutateResult(
        resources={"v.com/n": 2}
    )
    assert _mutate.__name__ == "_mutate"

    @denies_invalid_input
    def broken() -> MutateResult | None:
        raise KeyError("a bug, not bad input")

    with pytest.raises(KeyError):
        broken()


def test_stated_quantities_keep_what_the_container_wrote_limits_first():
    container = {
        "name": "main",
        "resources": {
            "limits": {"v.com/n": 2, "v.com/mem": "16Gi"},
            "requests": {"v.com/mem": "1Gi", "v.com/cores": "30", "other/x": "1"},
        },
    }
    got = stated_quantities(container, ("v.com/n", "v.com/mem", "v.com/cores", "v.com/absent"))
    assert got == {"v.com/n": 2, "v.com/mem": "16Gi", "v.com/cores": "30"}
    assert stated_quantities({"name": "bare"}, ("v.com/n",)) == {}
    assert stated_quantities(
        {"name": "m", "resources": {"limits": {"v.com/n": 1.5}}}, ["v.com/n"]
    ) == {"v.com/n": "1.5"}
