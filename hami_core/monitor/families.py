"""Metric families as plain data, so the domain never imports prometheus_client."""

from __future__ import annotations

from typing import Literal

import attrs


@attrs.define
class Family:
    """One metric: name, help, type, label names and samples.

    Attributes:
        samples: ``(label values in ``labels`` order, value)`` pairs.
    """

    name: str
    help: str
    labels: tuple[str, ...]
    kind: Literal["gauge", "counter"] = "gauge"
    samples: list[tuple[tuple[str, ...], float]] = attrs.field(factory=list)

    def add(self, values: tuple[str, ...], value: float) -> None:
        """Append one sample; ``values`` must match ``labels`` one to one.

        Raises:
            ValueError: a label value is missing or extra.
        """
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name}: {len(values)} label values for {self.labels}")
        self.samples.append((values, value))
