"""Lossless JSON <-> model conversion (tplog.protocol.json) over generated threads."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from strategies import THREAD_SETTINGS, message_parts, threads, threads_v003

from tplog.errors import InvalidInputError
from tplog.protocol.json import from_builtins, from_json, to_builtins, to_json
from tplog.protocol.model import (
    UNSET,
    BinaryContent,
    ExtensionContent,
    ExtensionPart,
    FilePart,
    MessagePart,
    TextPart,
    Thread,
    UserPromptPart,
)


def typed(value: Any) -> Any:
    """A form whose equality also checks JSON types: 1 != 1.0 != True, -0.0 != 0.0."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, str):
        return ("str", value)
    if value is None:
        return ("null",)
    if isinstance(value, list):
        return ("array", tuple(typed(v) for v in value))
    if isinstance(value, dict):
        return ("object", tuple(sorted((k, typed(v)) for k, v in value.items())))
    raise AssertionError(f"not a JSON builtin: {type(value)}")


def test_typed_distinguishes_json_types() -> None:
    assert typed(1) != typed(1.0)
    assert typed(1) != typed(True)
    assert typed(0.0) != typed(-0.0)
    assert typed({"a": [1]}) == typed({"a": [1]})


@THREAD_SETTINGS
@given(threads())
def test_builtins_roundtrip_v004(doc: dict[str, Any]) -> None:
    t = from_builtins(doc, Thread)
    assert typed(to_builtins(t)) == typed(doc)


@THREAD_SETTINGS
@given(threads_v003(allow_v004_names=True))
def test_builtins_roundtrip_v003(doc: dict[str, Any]) -> None:
    assert typed(to_builtins(from_builtins(doc, Thread))) == typed(doc)


@THREAD_SETTINGS
@given(threads())
def test_json_roundtrip_of_models(doc: dict[str, Any]) -> None:
    t = from_builtins(doc, Thread)
    data = to_json(t)
    back = from_json(data)
    assert back == t
    assert to_json(back) == data
    assert typed(json.loads(data)) == typed(doc)
    assert from_json(to_json(t, indent=2)) == t


@THREAD_SETTINGS
@given(threads())
def test_from_json_of_foreign_text_equals_from_builtins(doc: dict[str, Any]) -> None:
    text = json.dumps(doc, ensure_ascii=True, indent=1)
    assert from_json(text) == from_builtins(doc, Thread)
    assert from_json(text.encode()) == from_builtins(doc, Thread)


@THREAD_SETTINGS
@given(threads())
def test_msgpack_storage_roundtrip(doc: dict[str, Any]) -> None:
    """The Structs themselves (what the store persists as msgpack) round-trip too."""
    t = from_builtins(doc, Thread)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(t), type=Thread) == t


@THREAD_SETTINGS
@given(message_parts)
def test_single_part_roundtrip(part: dict[str, Any]) -> None:
    p = from_builtins(part, MessagePart)
    assert typed(to_builtins(p)) == typed(part)
    if not part["part_kind"].startswith(("user-prompt", "text", "thinking", "tool-", "retry-prompt", "file")):
        assert isinstance(p, ExtensionPart)


# --------------------------------------------------------------------------- examples


_BASE = {"version": "0.0.4", "thread_id": "t", "created_at": "c", "updated_at": "u", "agents": {}, "turns": []}


def test_null_and_absent_stay_apart() -> None:
    absent = from_builtins(dict(_BASE), Thread)
    null = from_builtins({**_BASE, "title": None, "metadata": None}, Thread)
    assert absent.title is UNSET and null.title is None
    assert absent != null
    assert "title" not in to_builtins(absent)
    assert to_builtins(null)["title"] is None and to_builtins(null)["metadata"] is None


def test_extensions_kept_whole() -> None:
    part = {
        "part_kind": "user-prompt",
        "content": [{"kind": "custom:widget", "w": [1, {"x": None}]}, "text"],
        "x-vendor": 1,
    }
    p = from_builtins(part, MessagePart)
    assert isinstance(p, UserPromptPart)
    assert p.extra == {"x-vendor": 1}
    assert isinstance(p.content, list) and isinstance(p.content[0], ExtensionContent)
    assert p.content[0].kind_ == "custom:widget"
    assert to_builtins(p) == part
    ext = from_builtins({"part_kind": "meta:trace", "span": "abc"}, MessagePart)
    assert ext == ExtensionPart(part_kind_="meta:trace", data={"span": "abc"})


def test_unknown_field_on_known_object() -> None:
    p = from_builtins({"part_kind": "text", "content": "hi", "x-score": 0.5, "meta:k": None}, MessagePart)
    assert p == TextPart(content="hi", extra={"x-score": 0.5, "meta:k": None})


# --------------------------------------------------------------------------- bugs exposed in tplog.protocol.json


def _file_part(content: dict[str, Any]) -> dict[str, Any]:
    return {"part_kind": "file", "content": content}


def test_file_part_content_with_wrong_kind_is_not_silently_rewritten() -> None:
    """BUG (tplog.protocol.json): FilePart.content is typed BinaryContent, a struct tagged ``kind``.

    ``_struct_converter`` never checks the tag value of a directly-typed tagged
    struct, so ``kind: "image-url"`` is accepted and re-encoded as
    ``kind: "binary"``: the document changes silently (and so does its hash).
    It must either be refused (InvalidInputError at ``$.content.kind``) or kept.
    """
    doc = _file_part({"kind": "image-url", "data": "AA==", "media_type": "image/png"})
    try:
        p = from_builtins(doc, MessagePart)
    except InvalidInputError:
        return
    assert to_builtins(p) == doc


def test_file_part_content_without_kind_keeps_unknown_fields() -> None:
    """BUG (tplog.protocol.json): with the tag field absent, the extra-field shortcut
    ``len(value) > len(kwargs) + 1`` assumes the tag is present and drops one
    unknown field (here ``x-vendor``) silently; ``kind`` is also invented on output."""
    doc = _file_part({"data": "AA==", "media_type": "image/png", "x-vendor": 1})
    try:
        p = from_builtins(doc, MessagePart)
    except InvalidInputError:
        return
    assert isinstance(p, FilePart) and isinstance(p.content, BinaryContent)
    assert p.content.extra == {"x-vendor": 1}
    assert to_builtins(p) == doc


def test_bad_normative_part_names_path() -> None:
    doc = {
        **_BASE,
        "turns": [{"turn_type": "user", "submitted_at": "s", "parts": [{"part_kind": "tool-call", "tool_name": "f"}]}],
    }
    with pytest.raises(InvalidInputError) as info:
        from_builtins(doc, Thread)
    assert info.value.path == "$.turns[0].parts[0]"
