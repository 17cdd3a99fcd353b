"""Lossless conversion between ThreadProtocol JSON and the model Structs.

msgspec's own decoders drop unknown fields and reject unknown union tags; the
protocol requires both to be preserved. So JSON is first parsed into builtins,
then converted here by a small converter compiled once per Struct type:

- known fields are converted by their annotated type (with msgspec, for leaves);
- every other key goes into the object's ``extra`` dict, unchanged;
- a part / user content whose kind the protocol does not define becomes an
  :class:`~tplog.protocol.model.ExtensionPart` / ``ExtensionContent`` holding the object;
- a normative kind with the wrong shape is an :class:`InvalidInputError` naming
  the JSON path (``$.turns[1].messages[0].parts[2].tool_call_id``).

Encoding reverses it: ``extra`` is merged back into its object, ``UNSET``
fields are left out, extension objects are written back as they came.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Union

import msgspec
from msgspec import UNSET, UnsetType

from tplog.errors import InvalidInputError, LimitExceededError
from tplog.protocol import model as m

__all__ = ["from_builtins", "from_json", "to_builtins", "to_json"]

S = TypeVar("S", bound=msgspec.Struct)
_Conv = Callable[[Any, str], Any]

_json_decoder = msgspec.json.Decoder()
_json_encoder = msgspec.json.Encoder()

# Open unions: a discriminator field, the known kinds, and the extension class.
_OPEN_UNIONS: dict[Any, tuple[str, Mapping[str, type[msgspec.Struct]], type[msgspec.Struct] | None]] = {
    m.MessagePart: ("part_kind", m.PART_KINDS, m.ExtensionPart),
    m.Message: ("message_type", m.MESSAGE_TYPES, None),
    m.Turn: ("turn_type", m.TURN_TYPES, None),
}
_CONTENT_UNION_MEMBERS = frozenset(m.CONTENT_KINDS.values()) | {m.ExtensionContent}

_compiled: dict[type, _Conv] = {}


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(value), type(value).__name__
    )


def _key_path(path: str, key: str) -> str:
    """``$.name`` for identifier keys, ``$["agent.routing"]`` for any other key."""
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{msgspec.json.encode(key).decode()}]"


def _leaf(tp: Any) -> _Conv:
    def conv(value: Any, path: str) -> Any:
        try:
            return msgspec.convert(value, tp, strict=True)
        except msgspec.ValidationError as exc:
            # msgspec's message ends in "- at `$...`" relative to the value; re-anchor it.
            msg = str(exc)
            sub = ""
            if " - at `$" in msg:
                msg, _, rest = msg.partition(" - at `$")
                sub = rest.rstrip("`")
            raise InvalidInputError(msg, path=path + sub) from exc

    return conv


def _tagged(field: str, kinds: Mapping[str, type[msgspec.Struct]], ext: type[msgspec.Struct] | None) -> _Conv:
    def conv(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise InvalidInputError(f"Expected `object`, got `{_type_name(value)}`", path=path)
        tag = value.get(field)
        if not isinstance(tag, str):
            raise InvalidInputError(f"Object is missing its `{field}` string", path=path)
        cls = kinds.get(tag)
        if cls is not None:
            return _struct_converter(cls)(value, path)
        if ext is None:
            raise InvalidInputError(
                f"Unknown {field} {tag!r}; expected one of {sorted(kinds)}", path=f"{path}.{field}"
            )
        data = {k: v for k, v in value.items() if k != field}
        if ext is m.ExtensionPart:
            return m.ExtensionPart(part_kind_=tag, data=data)
        return m.ExtensionContent(kind_=tag, data=data)

    return conv


def _converter(tp: Any) -> _Conv:
    """Build the converter for one annotated type."""
    if tp in _OPEN_UNIONS:
        return _tagged(*_OPEN_UNIONS[tp])
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        tag_field = tp.__struct_config__.tag_field
        if tag_field is None:
            return _struct_converter(tp)
        inner = _struct_converter(tp)

        def conv_tagged(value: Any, path: str) -> Any:  # nested tagged objects must say what they are
            if isinstance(value, dict) and tag_field not in value:
                raise InvalidInputError(f"Object missing required field `{tag_field}`", path=path)
            return inner(value, path)

        return conv_tagged
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (Union, types.UnionType):
        members = [a for a in args if a is not UnsetType]
        if set(members) >= _CONTENT_UNION_MEMBERS:  # UserContent: str or a kind-tagged object
            content = _tagged("kind", m.CONTENT_KINDS, m.ExtensionContent)

            def conv_content(value: Any, path: str) -> Any:
                return value if isinstance(value, str) else content(value, path)

            return conv_content
        complex_members = [a for a in members if _is_complex(a)]
        if not complex_members:
            return _leaf(Union[tuple(members)] if len(members) > 1 else members[0])
        simple = [a for a in members if not _is_complex(a)]
        simple_conv = _leaf(Union[tuple(simple)]) if simple else None
        complex_convs = [(a, _converter(a)) for a in complex_members]

        def conv_union(value: Any, path: str) -> Any:
            for a, c in complex_convs:
                if _matches(a, value):
                    return c(value, path)
            if simple_conv is not None:
                return simple_conv(value, path)
            return complex_convs[0][1](value, path)

        return conv_union
    if origin is list and args and _is_complex(args[0]):
        item = _converter(args[0])

        def conv_list(value: Any, path: str) -> Any:
            if not isinstance(value, list):
                raise InvalidInputError(f"Expected `array`, got `{_type_name(value)}`", path=path)
            return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]

        return conv_list
    if origin is dict and len(args) == 2 and _is_complex(args[1]):
        val = _converter(args[1])

        def conv_dict(value: Any, path: str) -> Any:
            if not isinstance(value, dict):
                raise InvalidInputError(f"Expected `object`, got `{_type_name(value)}`", path=path)
            return {k: val(v, _key_path(path, k)) for k, v in value.items()}

        return conv_dict
    return _leaf(tp)


def _is_complex(tp: Any) -> bool:
    if tp in _OPEN_UNIONS:
        return True
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return True
    origin = typing.get_origin(tp)
    if origin in (list, dict, Union, types.UnionType):
        return any(_is_complex(a) for a in typing.get_args(tp))
    return False


def _matches(tp: Any, value: Any) -> bool:
    if tp in _OPEN_UNIONS or (isinstance(tp, type) and issubclass(tp, msgspec.Struct)):
        return isinstance(value, dict)
    origin = typing.get_origin(tp) or tp
    return isinstance(value, origin) if isinstance(origin, type) else False


def _struct_converter(cls: type[msgspec.Struct]) -> _Conv:
    conv = _compiled.get(cls)
    if conv is not None:
        return conv
    hints = typing.get_type_hints(cls)
    fields: list[tuple[str, str, _Conv, bool]] = []
    names: set[str] = set()
    tag_field = cls.__struct_config__.tag_field
    for f in msgspec.structs.fields(cls):
        if f.name == "extra":
            continue
        required = f.default is msgspec.NODEFAULT and f.default_factory is msgspec.NODEFAULT
        fields.append((f.name, f.encode_name, _NOT_YET, required))
        names.add(f.encode_name)
    if tag_field:
        names.add(tag_field)

    def conv_struct(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise InvalidInputError(f"Expected `object`, got `{_type_name(value)}`", path=path)
        if tag_field and tag_field in value and value[tag_field] != cls.__struct_config__.tag:
            raise InvalidInputError(
                f"Expected {tag_field} {cls.__struct_config__.tag!r}, got {value[tag_field]!r}",
                path=f"{path}.{tag_field}",
            )
        kwargs: dict[str, Any] = {}
        for i, (name, key, fconv, required) in enumerate(fields):
            if key in value:
                if fconv is _NOT_YET:
                    fconv = _converter(hints[name])
                    fields[i] = (name, key, fconv, required)
                kwargs[name] = fconv(value[key], f"{path}.{key}")
            elif required:
                raise InvalidInputError(f"Object missing required field `{key}`", path=path)
        if len(value) > len(kwargs) + (1 if tag_field and tag_field in value else 0):
            extra = {k: v for k, v in value.items() if k not in names}
            if extra:
                kwargs["extra"] = extra
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:  # pragma: no cover - guarded above
            raise InvalidInputError(str(exc), path=path) from exc

    _compiled[cls] = conv_struct
    return conv_struct


def _not_yet(value: Any, path: str) -> Any:  # pragma: no cover - placeholder, replaced lazily
    raise AssertionError


_NOT_YET: _Conv = _not_yet


def from_builtins(obj: Any, type: type[S], *, path: str = "$") -> S:
    """Convert JSON-like builtins (dicts, lists, str, ...) into ``type``, losslessly."""
    if type in _OPEN_UNIONS:
        return typing.cast(S, _converter(type)(obj, path))
    return typing.cast(S, _struct_converter(type)(obj, path))


def from_json(data: bytes | str, type: Any = m.Thread) -> Any:
    """Decode a JSON document into ``type`` (default :class:`Thread`), losslessly.

    Raises :class:`InvalidInputError` naming the JSON path for malformed JSON,
    wrong types or a normative object of the wrong shape.
    """
    try:
        obj = _json_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"Malformed JSON: {exc}") from exc
    except RecursionError as exc:
        raise LimitExceededError("JSON nests too deeply to decode") from exc
    try:
        return from_builtins(obj, type)
    except RecursionError as exc:
        raise LimitExceededError("JSON nests too deeply to convert") from exc


def to_builtins(obj: Any) -> Any:
    """The JSON-ready builtins of a model object: ``extra`` merged back, ``UNSET`` left out."""
    if isinstance(obj, msgspec.Struct):
        if isinstance(obj, m.ExtensionPart):
            return {"part_kind": obj.part_kind_, **obj.data}
        if isinstance(obj, m.ExtensionContent):
            return {"kind": obj.kind_, **obj.data}
        out: dict[str, Any] = {}
        cfg = obj.__struct_config__
        if cfg.tag_field is not None:
            out[cfg.tag_field] = cfg.tag
        for name, key in zip(obj.__struct_fields__, obj.__struct_encode_fields__, strict=False):
            if name == "extra":
                continue
            value = getattr(obj, name)
            if value is UNSET:
                continue
            out[key] = to_builtins(value)
        extra = getattr(obj, "extra", None)
        if extra:
            for k, v in extra.items():
                out.setdefault(k, v)
        return out
    if isinstance(obj, list):
        return [to_builtins(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_builtins(v) for k, v in obj.items()}
    return obj


def to_json(obj: Any, *, indent: int = 0) -> bytes:
    """Encode a model object (or builtins) as ThreadProtocol JSON."""
    data = _json_encoder.encode(to_builtins(obj))
    return msgspec.json.format(data, indent=indent) if indent else data
