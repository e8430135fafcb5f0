"""Classes of identical nodes, so a pod of a new shape is fitted once per class.

Two nodes are in one class when their devices and usage are the same but for the
node's name and the devices' UUIDs, consistently renamed (device ``i`` of one is device
``i`` of the other) with the UUIDs in the same sort order. A backend that declares
``BackendInfo.fit_by_node_class`` treats names and UUIDs as opaque labels (compares
them, never reads into them), so its answer for one node of a class is, relabelled,
its answer for every other: the scheduler fits one node of each class and relabels
the ``NodeFit`` for the rest (``Scheduler.filter``). A fresh cluster's nodes are all in
one class; a node leaves it when its usage changes.

What is not shared: a value the walk does not know (``node_signature`` answers None:
the node is fitted alone), a pod whose annotations mention a node's name or one of its
UUIDs (``mentions``: a UUID filter picks devices by name), and an answer that carries a
name inside a longer string (``relabel`` raises ``Unshareable``: fitted alone).
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import re
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

import attrs

from hami_core.model import DeviceInfo, DeviceUsage, NodeInfo

from .fitting import NodeFit


class Unshareable(Exception):
    """A value that cannot be canonicalised or relabelled: fit the node alone."""


_ATOMS = (bool, int, float, type(None), enum.Enum, dt.datetime, dt.date, dt.timedelta)


def labels_of(info: NodeInfo) -> tuple[str, ...]:
    """The node's identity labels: its name, then each device's UUID in inventory order."""
    return (info.name, *(d.uuid for d in info.devices))


def node_signature(info: NodeInfo, usage: Mapping[str, DeviceUsage]) -> Hashable | None:
    """A hashable key equal for two nodes exactly when they are in one class (see the
    module docstring): ``info`` (without its name) and ``usage`` (in order) with every
    name and UUID replaced by its position, plus the UUIDs' sort order. None when a pod
    holds part of a device (``DeviceUsage.holders``), when the node holds a value this
    cannot canonicalise, or names its devices ambiguously (a UUID repeated or equal to
    the node name)."""
    if any(u.holders for u in usage.values()):
        # Pods hold part of its devices: their annotations (which backends may read)
        # carry per-pod stamps and UUIDs, so such a node would hardly ever match
        # another, and comparing them costs more than the fit saved.
        return None
    labels = labels_of(info)
    if len(set(labels)) != len(labels) or not all(labels):
        return None
    canon = _Canon(labels)
    try:
        body = canon.node(info)
        used = tuple((canon(k), canon.usage(u)) for k, u in usage.items())
    except Unshareable:
        return None
    order = tuple(sorted(range(len(labels) - 1), key=lambda i: labels[i + 1]))
    return (order, body, used)


class _Canon:
    """One node's values with its labels replaced by their positions.

    The model's own types (``NodeInfo``, ``DeviceInfo``, ``DeviceUsage``) are read
    field by field (a unit test holds their field lists to what is read here); anything
    else is walked generically.
    """

    def __init__(self, labels: tuple[str, ...]) -> None:
        self.labels = labels
        # A label's placeholder: its position (-1 the node's name), in a tuple that no
        # canonical value equals (every canonical tuple starts with a type or a tag).
        self.tokens = {label: ("\0label", i - 1) for i, label in enumerate(labels)}
        self.pattern: re.Pattern[str] | None = None
        self.devices: dict[int, Hashable] = {}  # id(DeviceInfo) -> its canonical form

    def node(self, info: NodeInfo) -> Hashable:
        """``info`` but its name."""
        return (
            tuple(self.device(d) for d in info.devices),
            self(info.cordoned_uuids) if info.cordoned_uuids else (),
            self(info.link_scores) if info.link_scores else (),
            self(info.unregistered) if info.unregistered else (),
            self(info.ignored) if info.ignored else (),
        )

    def device(self, d: DeviceInfo) -> Hashable:
        found = self.devices.get(id(d))
        if found is None:
            found = self.devices[id(d)] = (
                self(d.uuid),
                self(d.vendor),
                self(d.model),
                d.index,
                d.split_count,
                d.memory_mib,
                d.cores_pct,
                d.numa,
                self(d.mode),
                d.healthy,
                self(d.custom) if d.custom else (),
                self(d.mig_profiles) if d.mig_profiles else (),
                self(d.node_local) if d.node_local else (),
            )
        return found

    def usage(self, u: DeviceUsage) -> Hashable:
        return (
            self.device(u.device),
            u.used_count,
            u.used_memory_mib,
            u.used_cores_pct,
            u.cordoned,
            self(u.holders) if u.holders else (),
            self(u.mig_in_use) if u.mig_in_use else (),
        )

    def __call__(self, x: Any) -> Hashable:
        if isinstance(x, str):
            found = self.tokens.get(x)
            if found is not None:
                return found
            if not any(label in x for label in self.labels):
                return x
            # A label inside a longer string (an allocation in a holder's annotations):
            # the same string with each label replaced by its position, in one pass.
            if self.pattern is None:
                ordered = sorted(self.labels, key=len, reverse=True)
                self.pattern = re.compile("|".join(re.escape(s) for s in ordered))
            return ("\0sub", self.pattern.sub(lambda m: f"\0{self.tokens[m.group(0)][1]}\0", x))
        if isinstance(x, _ATOMS):
            return x
        if isinstance(x, (tuple, list)):
            return (type(x), tuple(self(e) for e in x))
        if isinstance(x, Mapping):
            return ("\0map", tuple((self(k), self(v)) for k, v in x.items()))
        if isinstance(x, (set, frozenset)):
            return ("\0set", frozenset(self(e) for e in x))
        if isinstance(x, DeviceInfo):
            return self.device(x)
        if isinstance(x, DeviceUsage):
            return self.usage(x)
        if attrs.has(type(x)):
            return (type(x), tuple(self(getattr(x, f.name)) for f in _fields(type(x))))
        raise Unshareable(f"cannot compare a {type(x).__name__}")


#: The fields ``_Canon`` reads by name, per model type (a unit test checks each type
#: has exactly these, so a new field cannot be left out of the signature unnoticed).
CANON_FIELDS = {
    NodeInfo: ("name", "devices", "cordoned_uuids", "link_scores", "unregistered", "ignored"),
    DeviceInfo: (
        "uuid",
        "vendor",
        "model",
        "index",
        "split_count",
        "memory_mib",
        "cores_pct",
        "numa",
        "mode",
        "healthy",
        "custom",
        "mig_profiles",
        "node_local",
    ),
    DeviceUsage: (
        "device",
        "used_count",
        "used_memory_mib",
        "used_cores_pct",
        "cordoned",
        "holders",
        "mig_in_use",
    ),
}


_FIELDS: dict[type, tuple[Any, ...]] = {}


def _fields(cls: type) -> tuple[Any, ...]:
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = tuple(attrs.fields(cls))
    return found


#: Characters of the pieces a long text is indexed by (``_pieces``).
_PIECE = 6
#: Texts shorter than this are searched label by label (cheaper than an index).
_INDEX_FROM = 4096


@functools.lru_cache(maxsize=1)
def _pieces(text: str) -> frozenset[str]:
    """Every ``_PIECE`` characters of ``text`` at every offset. A label is in ``text``
    only if each of its pieces is; kept for the last text asked (a filter asks for one
    pod's text once per node)."""
    return frozenset(text[i : i + _PIECE] for i in range(len(text) - _PIECE + 1))


def mentions(text: str, labels: tuple[str, ...]) -> bool:
    """Whether ``text`` (a pod's annotations) contains one of a node's ``labels`` (its
    name, a UUID): such a pod's answer may single the node out, so it is fitted alone.

    A text of ``_INDEX_FROM`` characters or more (annotations reach 256 KiB, and any
    key counts: its author's, kubectl's last-applied-configuration) is searched only
    for a label all of whose pieces it holds (``_pieces``), not once per label: nodes x
    (GPUs + 1) scans of the whole text per pod before, under the state lock."""
    if len(text) < _INDEX_FROM:
        return any(label in text for label in labels)
    pieces = _pieces(text)
    return any(
        all(label[i : i + _PIECE] in pieces for i in range(0, len(label) - _PIECE + 1, _PIECE))
        and label in text
        for label in labels
    )


def relabel(obj: Any, mapping: Mapping[str, str]) -> Any:
    """``obj`` (a ``NodeFit`` and what it holds) with every string that is a key of
    ``mapping`` replaced by its value; objects left unchanged are returned as they are.

    Raises:
        Unshareable: a string contains a key of ``mapping`` inside it, or ``obj`` holds
            a value this does not know.
    """
    if isinstance(obj, str):
        found = mapping.get(obj)
        if found is not None:
            return found
        if any(k in obj for k in mapping):
            raise Unshareable(f"a label inside {obj!r}")
        return obj
    if isinstance(obj, _ATOMS):
        return obj
    if isinstance(obj, tuple):
        items = tuple(relabel(e, mapping) for e in obj)
        return obj if all(a is b for a, b in zip(items, obj, strict=True)) else items
    if isinstance(obj, Mapping):
        pairs = [(relabel(k, mapping), relabel(v, mapping)) for k, v in obj.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(pairs, obj.items(), strict=True)):
            return obj
        return dict(pairs)
    if isinstance(obj, frozenset):
        return frozenset(relabel(e, mapping) for e in obj)
    if attrs.has(type(obj)):
        changes = {}
        for f in _fields(type(obj)):
            value = getattr(obj, f.name)
            new = relabel(value, mapping)
            if new is not value:
                changes[f.alias] = new
        return attrs.evolve(obj, **changes) if changes else obj
    raise Unshareable(f"cannot relabel a {type(obj).__name__}")


@attrs.frozen
class SharedFit:
    """The fit of another node of the same class, relabelled only when read (most
    nodes' fits are never read: the filter needs whether it fits and why not)."""

    source: NodeFit
    source_labels: tuple[str, ...]
    labels: tuple[str, ...]

    @property
    def placed(self) -> bool:
        return self.source.allocation is not None

    @property
    def reason(self) -> str:
        return self.source.reason

    def resolve(self) -> NodeFit:
        """This node's ``NodeFit``. Raises ``Unshareable`` only where the source's
        first relabelling did (the scheduler relabels one node of a class eagerly)."""
        fit: NodeFit = relabel(self.source, dict(zip(self.source_labels, self.labels, strict=True)))
        return fit


class LazyFits(Mapping[str, NodeFit]):
    """node name -> ``NodeFit``, relabelling a ``SharedFit`` on first read."""

    def __init__(self, items: dict[str, NodeFit | SharedFit]) -> None:
        self._items = items

    def __getitem__(self, name: str) -> NodeFit:
        value = self._items[name]
        if isinstance(value, SharedFit):
            value = self._items[name] = value.resolve()  # a race computes the same value
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items


__all__ = [
    "LazyFits",
    "SharedFit",
    "Unshareable",
    "labels_of",
    "mentions",
    "node_signature",
    "relabel",
]
