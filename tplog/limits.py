"""The input limits (:class:`Limits`) and what :meth:`~tplog.codec.Codec.encode` checks of an event
with them before anything is written: how deep it nests, and that it decodes as the schema says."""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Final

import msgspec

from tplog.events import Event

__all__ = ["NOT_CONTAINER_BYTES", "Limits", "check_type", "depth_ok"]


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """Configurable input limits; going over one is a :class:`LimitExceededError`.

    ``max_event_bytes``: msgpack size of one event. ``max_parts``: parts in one
    message or user turn. ``max_decompressed_bytes``: the most a stored value may
    inflate to (a zstd bomb is refused). ``blob_threshold``: events whose body is
    larger are stored once in ``blobs``, content-addressed and shared.
    ``max_depth``: nesting depth of JSON values inside an event.
    """

    max_event_bytes: int = 16 << 20
    max_parts: int = 10_000
    max_depth: int = 64
    max_decompressed_bytes: int = 64 << 20
    blob_threshold: int = 256 << 10
    compress_min_bytes: int = 96
    level: int = 3


_LEAVES: Final = frozenset({str, int, float, bool, type(None), bytes})
_SCALAR_TYPES: Final = frozenset({str, int, float, bool, type(None), bytes, msgspec.UnsetType})
_NESTED_FIELDS: dict[type, tuple[str, ...]] = {}


def _nested_fields(cls: type) -> tuple[str, ...]:
    """The fields of Struct ``cls`` whose declared type can hold a container (a
    Struct, list, dict or ``Any``); scalar-typed fields cannot nest. A value whose
    type breaks its declaration is refused later by the schema check."""
    names = _NESTED_FIELDS.get(cls)
    if names is None:
        out = []
        for f in msgspec.structs.fields(cls):
            t = f.type
            origin = typing.get_origin(t)
            args: tuple[Any, ...] = typing.get_args(t) if origin in (typing.Union, types.UnionType) else (t,)
            if not all(a in _SCALAR_TYPES or typing.get_origin(a) is typing.Literal for a in args):
                out.append(f.name)
        names = _NESTED_FIELDS[cls] = tuple(out)
    return names


#: Every byte value except msgpack's container headers (fixmap, fixarray, array 16/32,
#: map 16/32): ``len(body.translate(None, NOT_CONTAINER_BYTES))`` bounds how many
#: containers, and so how deep a nesting, ``body`` can hold.
NOT_CONTAINER_BYTES: Final = bytes(b for b in range(256) if not (0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF))


def depth_ok(obj: Any, limit: int) -> bool:
    """Whether ``obj`` nests at most ``limit`` deep. Runs on every append: only
    containers are pushed, leaves are skipped by their exact type."""
    stack = [(obj, 1)]
    pop, push = stack.pop, stack.append
    leaves = _LEAVES
    struct = msgspec.Struct
    while stack:
        o, d = pop()
        if d > limit:
            return False
        t = type(o)
        if t is dict:
            vals: Any = o.values()
        elif t is list or t is tuple:
            vals = o
        elif isinstance(o, struct):
            vals = [getattr(o, f) for f in _nested_fields(t)]
        elif isinstance(o, (dict, list, tuple)):  # subclasses
            vals = o.values() if isinstance(o, dict) else o
        else:
            continue
        d += 1
        for v in vals:
            if type(v) not in leaves:
                push((v, d))
    return True


def _raw_mirror(tp: Any, made: dict[type, Any]) -> Any:
    """``tp`` with every ``Any`` replaced by :class:`msgspec.Raw` and every Struct by a
    mirror of it (same tag, field names, encoded names, defaults and field order):
    decoding into it checks every typed field exactly as decoding into ``tp`` does,
    but leaves ``Any`` values (tool arguments and returns, metadata: the bulk of a
    large event) as undecoded slices instead of building them."""
    if tp is Any:
        return msgspec.Raw
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        if tp in made:
            if made[tp] is None:
                raise TypeError(f"{tp.__name__} refers to itself")  # not in tplog's schema
            return made[tp]
        made[tp] = None
        cfg = tp.__struct_config__
        fields = []
        for f in msgspec.structs.fields(tp):
            default = (msgspec.field(default=f.default, name=f.encode_name) if f.default is not msgspec.NODEFAULT
                       else msgspec.field(default_factory=f.default_factory, name=f.encode_name)
                       if f.default_factory is not msgspec.NODEFAULT else msgspec.field(name=f.encode_name))
            fields.append((f.name, _raw_mirror(f.type, made), default))
        mirror = msgspec.defstruct(tp.__name__, fields, kw_only=True, tag=cfg.tag, tag_field=cfg.tag_field,
                                   array_like=cfg.array_like, forbid_unknown_fields=cfg.forbid_unknown_fields)
        made[tp] = mirror
        return mirror
    origin = typing.get_origin(tp)
    if origin is None or origin is typing.Literal:
        return tp
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return typing.Annotated[(_raw_mirror(args[0], made), *tp.__metadata__)]
    if origin in (typing.Union, types.UnionType) and Any in args:
        return msgspec.Raw  # a union with Any takes anything (msgspec ignores Raw in a union)
    new = tuple(a if a is Ellipsis else _raw_mirror(a, made) for a in args)
    if origin in (typing.Union, types.UnionType):
        return typing.Union[new]
    return origin[new if len(new) > 1 else new[0]]


@functools.cache
def check_type() -> Any:
    """The append's schema-check type: ``Event`` mirrored by :func:`_raw_mirror` (built once)."""
    return _raw_mirror(Event, {})
