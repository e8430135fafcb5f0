"""Files and documents someone else wrote (a configuration, a snapshot, a Prometheus
answer): read with bounds, and every way they can be hostile turned into one short
``InvalidInputError``.

What a hostile document tries, and what stops it here:

- a file without end (``/dev/zero``, a FIFO that never closes): at most ``limit_bytes``
  are read;
- text that is not UTF-8: the offset of the first bad byte, no traceback;
- an integer of thousands of digits (CPython refuses to convert more than 4300,
  ``sys.get_int_max_str_digits``): named, no traceback;
- nesting deeper than the parser or Python's stack: named, no traceback;
- a YAML alias bomb ("billion laughs": a few hundred bytes whose aliases expand to
  billions of nodes): the parsed value is walked with a budget of nodes, shared ones
  counted each time they are reached, so what any later walk (validation, ``repr``, a
  JSON dump) would visit is bounded;
- a value put into an error message whole: ``shown`` bounds it;
- terminal escape sequences or bidirectional overrides in names printed to a terminal:
  ``printable`` escapes them.
"""

from __future__ import annotations

import json
import reprlib
from pathlib import Path
from typing import IO, Any

import yaml

from hami_core.errors import InvalidInputError

#: Bytes read from a configuration file at most (the largest HAMi chart's is ~10 KiB).
CONFIG_LIMIT_BYTES = 4 * 1024 * 1024
#: Bytes read from a cluster snapshot at most (``kubectl get nodes,pods -A -o yaml`` of
#: 5000 nodes and 50 000 pods is ~200 MiB).
SNAPSHOT_LIMIT_BYTES = 512 * 1024 * 1024
#: Nodes (mappings, sequences and scalars, each alias counted where it is used) one
#: document may expand to; a 50 000-pod snapshot is ~10 million.
NODE_BUDGET = 50_000_000
#: Nodes a configuration file may expand to (hami's, HAMi's device-config, the per-node
#: file): the largest HAMi chart's is a few hundred, a per-node file of 5000 nodes ~100 000.
#: Small, so that no error message or warning built from a value can be costly.
CONFIG_NODE_BUDGET = 1_000_000
#: Nesting a document may have; a Kubernetes object nests ~20 deep.
MAX_DEPTH = 200
#: Characters of a key or name from a document shown in a message at most.
KEY_SHOWN = 80
#: Characters of a whole error message about a configuration file at most.
MESSAGE_SHOWN = 500


def read_text(path: str | Path, *, limit_bytes: int = CONFIG_LIMIT_BYTES) -> str:
    """The UTF-8 text of ``path``, reading at most ``limit_bytes`` (+1 to tell).

    Raises:
        InvalidInputError: unreadable, longer than ``limit_bytes``, or not UTF-8; the
            message does not name the path (callers prefix it).
    """
    try:
        with open(path, "rb") as f:
            raw = _bounded(f, limit_bytes)
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror or exc}") from None
    return decode(raw)


def _bounded(f: IO[bytes], limit_bytes: int) -> bytes:
    raw = f.read(limit_bytes + 1)
    if len(raw) > limit_bytes:
        raise InvalidInputError(f"larger than {limit_bytes} bytes; refused")
    return raw


def read_limited(stream: IO[bytes], *, limit_bytes: int) -> bytes:
    """At most ``limit_bytes`` of ``stream`` (an HTTP answer, a pipe).

    Raises:
        InvalidInputError: the stream holds more.
    """
    return _bounded(stream, limit_bytes)


def decode(raw: bytes) -> str:
    """``raw`` as UTF-8 text.

    Raises:
        InvalidInputError: not UTF-8 (names the first bad byte and its offset).
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.start + 1].hex()
        raise InvalidInputError(f"not UTF-8 text: byte 0x{bad} at offset {exc.start}") from None


def load_yaml_all(text: str, loader: Any = None, *, budget: int = NODE_BUDGET) -> list[Any]:
    """Every document of ``text`` (YAML, so JSON too); when ``text`` has anchors, each
    checked by ``check_size`` (libyaml bounds nesting at 1000 itself).

    Args:
        loader: a safe loader class (default: libyaml's ``CSafeLoader`` where PyYAML has
            it, else ``SafeLoader``); never a loader that builds Python objects.
        budget: nodes one document may expand to (``check_size``).
    Raises:
        InvalidInputError: malformed YAML (with line and column), an integer too long to
            convert, nesting or expansion beyond the bounds.
    """
    loader = loader or getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        docs = list(yaml.load_all(text, Loader=loader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InvalidInputError(
            f"invalid YAML{where}: {exc.problem or exc.context or 'malformed'}"
        ) from None
    except yaml.YAMLError as exc:
        raise InvalidInputError(f"invalid YAML: {shown_text(str(exc))}") from None
    except RecursionError:
        raise InvalidInputError(f"invalid YAML: nested deeper than {MAX_DEPTH}") from None
    except ValueError as exc:  # int("9" * 5000) in the constructor
        raise InvalidInputError(f"invalid YAML: {_value_problem(exc)}") from None
    if "&" in text:  # an anchor: aliases may expand (no anchor, no alias)
        for doc in docs:
            check_size(doc, budget=budget)
    return docs


def load_yaml(text: str, loader: Any = None, *, budget: int = NODE_BUDGET) -> Any:
    """The one document of ``text`` (None when empty); see ``load_yaml_all``.

    Raises:
        InvalidInputError: as ``load_yaml_all``, or more than one document.
    """
    docs = load_yaml_all(text, loader, budget=budget)
    if len(docs) > 1:
        raise InvalidInputError(f"expected one YAML document, found {len(docs)}")
    return docs[0] if docs else None


def load_json(text: str | bytes) -> Any:
    """The JSON value of ``text``.

    Raises:
        InvalidInputError: malformed JSON (line and column), an integer too long,
            nesting beyond Python's stack or ``MAX_DEPTH``.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise InvalidInputError(f"invalid JSON: nested deeper than {MAX_DEPTH}") from None
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"not UTF-8 text: offset {exc.start}") from None
    except ValueError as exc:
        raise InvalidInputError(f"invalid JSON: {_value_problem(exc)}") from None
    return data  # JSON has no aliases; its depth is bounded by the parser's recursion


def check_size(data: Any, *, budget: int = NODE_BUDGET, max_depth: int = MAX_DEPTH) -> None:
    """Refuse ``data`` (what ``yaml``/``json`` return) when a consumer walking it would
    visit more than ``budget`` nodes or go deeper than ``max_depth``: an alias counts as
    every node it stands for, each time it is used.

    Sizes are computed once per distinct object (memoized by identity), so the check
    costs one pass over what was parsed, not over what a bomb expands to.

    Raises:
        InvalidInputError: more than ``budget`` nodes (an alias bomb) or deeper than
            ``max_depth``.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    keep: list[Any] = []  # ids stay unique while their objects live
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        value, children_done = stack.pop()
        if not isinstance(value, dict | list | tuple):
            continue
        key = id(value)
        if key in size:
            continue
        children = [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
        if not children_done:
            if key in depth:  # reached again through itself: YAML's recursive alias
                raise InvalidInputError("refers to itself (a recursive YAML alias)")
            depth[key] = -1
            stack.append((value, True))
            stack.extend((c, False) for c in children)
            continue
        containers = [c for c in children if isinstance(c, dict | list | tuple)]
        total = 1 + len(children) - len(containers) + sum(size[id(c)] for c in containers)
        deepest = 1 + max((depth[id(c)] for c in containers), default=0)
        if total > budget:
            raise InvalidInputError(
                f"expands to more than {budget} values (YAML aliases used as a bomb?)"
            )
        if deepest > max_depth:
            raise InvalidInputError(f"nested deeper than {max_depth}")
        size[key], depth[key] = total, deepest
        keep.append(value)


def _value_problem(exc: ValueError) -> str:
    text = str(exc)
    if "integer string conversion" in text:
        return "an integer with more digits than can be converted (4300 at most)"
    return shown_text(text)


_REPR = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6
_REPR.maxlevel = 3
_REPR.maxlong = 40


def shown(value: object) -> str:
    """``repr(value)`` for an error message, bounded (160 characters at most: strings cut
    at 80, containers at 6 items and 3 levels, integers at 40 digits) and
    with control and bidirectional characters escaped (``repr`` escapes what is not
    printable)."""
    try:
        text = _REPR.repr(value)
        return text if len(text) <= 160 else text[:157] + "..."
    except ValueError:  # an int beyond CPython's 4300-digit conversion limit
        return f"<an integer of {value.bit_length() if isinstance(value, int) else '?'} bits>"


def shown_key(key: object) -> str:
    """A key or name from a document (a mapping key, a node name) for a message:
    ``str(key)`` cut at ``KEY_SHOWN`` characters and made ``printable``; unquoted, as
    the path ``nvidia.deviceSplitCount`` names it."""
    return shown_text(key if isinstance(key, str) else shown(key), KEY_SHOWN)


def shown_message(text: str) -> str:
    """A whole message about a document (an error with the path of its file in front)
    cut at ``MESSAGE_SHOWN`` characters and made ``printable`` on one line: whatever
    part of it came from the document, it is bounded and cannot act on a terminal."""
    return shown_text(text, MESSAGE_SHOWN)


def shown_text(text: str, limit: int = 200) -> str:
    """``text`` (a message from elsewhere) cut at ``limit`` characters and made
    ``printable``."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    return printable(cut)


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` safe to print to a terminal: control characters (C0, DEL, C1: ESC starts
    a terminal escape sequence), format characters (bidirectional overrides such as
    U+202E, zero-width joiners) and line or paragraph separators written as ``\\xNN`` /
    ``\\uNNNN``; everything else as it is (``keep_newlines``: ``\\n`` too, for a
    message of several lines whose values were already ``shown``)."""
    if text.isprintable():
        return text
    keep = " \n" if keep_newlines else " "
    return "".join(ch if ch.isprintable() or ch in keep else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    return (
        f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    )
