"""Samples of Prometheus' text exposition format (version 0.0.4: ``name{label="value",...}
value [timestamp]``), as ``hami monitor`` writes its /metrics.

The page is someone else's (a monitor on a node a tenant's pods run on, or whatever
answers at the URL): only the metric names asked for are read, a line longer than
``LINE_LIMIT`` or not of the format is skipped, label values are unescaped as the format
says (``\\\\``, ``\\"``, ``\\n``) and kept as data (rendering makes them printable), and a
value no quantity can have (``NaN``, ``±Inf``, negative) is skipped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterator

#: Characters of one line read at most (a /metrics line of ours is well under 1000).
LINE_LIMIT = 4096

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*(,|\})')
_VALUE = re.compile(r"\s+(\S+)(?:\s+-?\d+)?\s*$")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def samples(text: str, names: Collection[str]) -> Iterator[tuple[str, dict[str, str], float]]:
    """``(metric name, labels, value)`` of every well-formed sample of ``names`` in
    ``text``, in page order (others skipped: module docstring)."""
    for line in text.splitlines():
        if len(line) > LINE_LIMIT or not line or line.startswith("#"):
            continue
        sample = _sample(line)
        if sample is not None and sample[0] in names:
            yield sample


def _sample(line: str) -> tuple[str, dict[str, str], float] | None:
    name = _NAME.match(line)
    if name is None:
        return None
    pos = name.end()
    labels: dict[str, str] = {}
    if line.startswith("{", pos):
        pos += 1
        while not line.startswith("}", pos):  # ``{}`` and a trailing comma are allowed
            label = _LABEL.match(line, pos)
            if label is None:
                return None
            labels[label.group(1)] = re.sub(r"\\.", _unescape, label.group(2))
            pos = label.end()
            if label.group(3) == "}":
                pos -= 1
                break
        pos += 1
    value = _VALUE.match(line, pos)
    if value is None:
        return None
    try:
        number = float(value.group(1))
    except ValueError:
        return None
    if not math.isfinite(number) or number < 0:
        return None
    return name.group(0), labels, number


def _unescape(match: re.Match[str]) -> str:
    return _ESCAPES.get(match.group(0), match.group(0))
