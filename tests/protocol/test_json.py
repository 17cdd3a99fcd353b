"""tplog.protocol.json: its converters, each built fresh, and lossless round trips over generated threads.

The module compiles one converter per Struct type and keeps it in ``_compiled``; a process
that converted anything before has them built already. Each test here starts from an empty
table (the autouse fixture), so the converters are built by the code under test; the converter
tests assert the exact model objects, error messages and JSON paths, the round trips (last) that
JSON <-> model conversion loses nothing.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Union

import msgspec
import pytest
from hypothesis import given
from msgspec import UNSET, UnsetType
from strategies import THREAD_SETTINGS, message_parts, threads, threads_v003

from tplog.errors import InvalidInputError, LimitExceededError
from tplog.protocol import json as pj
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins, from_json, to_builtins, to_json
from tplog.protocol.model import (
    BinaryContent,
    ExtensionContent,
    ExtensionPart,
    FilePart,
    MessagePart,
    TextPart,
    Thread,
    UserPromptPart,
)

T = "2026-01-01T00:00:00Z"


@pytest.fixture(autouse=True)
def _fresh_converters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pj, "_compiled", {})


def _thread(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"version": "0.0.4", "thread_id": "th-1", "created_at": T, "updated_at": T,
                            "agents": {}, "turns": []}
    base.update(fields)
    return base


def _agent_turn(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"turn_type": "agent", "agent_id": "a1", "started_at": T, "messages": list(messages), **fields}


def _response(*parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"message_type": "response", "timestamp": T, "agent_id": "a1", "parts": list(parts), **fields}


def _refused(doc: Any, tp: Any = m.Thread) -> InvalidInputError:
    with pytest.raises(InvalidInputError) as info:
        from_builtins(doc, tp)
    return info.value


def _leaf_refused(err: InvalidInputError, path: str) -> None:
    """A leaf msgspec refused: tplog's error with the whole JSON path, msgspec's words (whatever its
    version says) kept for people but re-anchored there: its own ``- at `$…``` suffix is dropped."""
    assert isinstance(err.__cause__, msgspec.ValidationError)
    assert err.path == path
    assert str(err) == f"{str(err.__cause__).partition(' - at `$')[0]} (at {path})"


# --------------------------------------------------------------------------- a whole thread, every kind of field


FULL = _thread(
    title="t",
    metadata={"k": [1, 2.5, None]},
    agents={"bot": {"agent_id": "bot", "agent_name": "Bot", "created_at": T, "x-a": 1},
            "agent.routing": {"agent_id": "r", "agent_name": "R", "created_at": T}},
    turns=[
        {"turn_type": "user", "submitted_at": T, "client_metadata": {"ip": "x"}, "parts": [
            {"part_kind": "user-prompt", "content": ["hi", {"kind": "image-url", "url": "u", "force_download": True},
                                                     {"kind": "binary", "data": "AA==", "media_type": "a/b"},
                                                     {"kind": "custom:w", "w": 1}]},
            {"part_kind": "user-prompt", "content": "plain"},
        ]},
        _agent_turn(
            {"message_type": "request", "timestamp": T, "agent_id": "a1", "parts": [
                {"part_kind": "retry-prompt", "content": [{"a": 1}], "tool_name": "f"}]},
            _response({"part_kind": "text", "content": "x", "id": "p1"},
                      {"part_kind": "thinking", "provider_name": "p", "content": None},
                      {"part_kind": "tool-call", "tool_name": "f", "tool_call_id": "c1", "args": {"q": [1]}},
                      {"part_kind": "tool-return", "tool_name": "f", "tool_call_id": "c1", "status": "ok",
                       "content_ref": {"uri": "s3://x", "size_bytes": 3}},
                      {"part_kind": "file", "content": {"kind": "binary", "data": "AA==", "media_type": "i/p"}},
                      {"part_kind": "meta:trace", "span": "s"},
                      usage={"input_tokens": 1, "cache_reads": 2}),
            {"message_type": "system", "timestamp": T, "event_type": "data-x", "event_data": [1],
             "target_agents": ["a", "b"]},
            completion_status="interrupted", interruption={"reason": "r", "interrupted_at": T},
            total_usage=None,
        ),
    ],
    relationships={"links": [{"thread_id": "p", "relation": "spawned_from", "metadata": {"m": 1}}]},
)


def test_a_thread_with_every_kind_of_field_converts_to_exactly_these_structs() -> None:
    got = from_builtins(FULL, m.Thread)
    want = m.Thread(
        version="0.0.4", thread_id="th-1", created_at=T, updated_at=T, title="t", metadata={"k": [1, 2.5, None]},
        agents={"bot": m.AgentConfig(agent_id="bot", agent_name="Bot", created_at=T, extra={"x-a": 1}),
                "agent.routing": m.AgentConfig(agent_id="r", agent_name="R", created_at=T)},
        turns=[
            m.UserTurn(submitted_at=T, client_metadata={"ip": "x"}, parts=[
                m.UserPromptPart(content=["hi", m.ImageUrl(url="u", force_download=True),
                                          m.BinaryContent(data="AA==", media_type="a/b"),
                                          m.ExtensionContent(kind_="custom:w", data={"w": 1})]),
                m.UserPromptPart(content="plain"),
            ]),
            m.AgentTurn(agent_id="a1", started_at=T, messages=[
                m.RequestMessage(timestamp=T, agent_id="a1",
                                 parts=[m.RetryPromptPart(content=[{"a": 1}], tool_name="f")]),
                m.ResponseMessage(timestamp=T, agent_id="a1", parts=[
                    m.TextPart(content="x", id="p1"),
                    m.ThinkingPart(provider_name="p", content=None),
                    m.ToolCallPart(tool_name="f", tool_call_id="c1", args={"q": [1]}),
                    m.ToolReturnPart(tool_name="f", tool_call_id="c1", status="ok",
                                     content_ref=m.ContentRef(uri="s3://x", size_bytes=3)),
                    m.FilePart(content=m.BinaryContent(data="AA==", media_type="i/p")),
                    m.ExtensionPart(part_kind_="meta:trace", data={"span": "s"}),
                ], usage=m.Usage(input_tokens=1, extra={"cache_reads": 2})),
                m.SystemMessage(timestamp=T, event_type="data-x", event_data=[1], target_agents=["a", "b"]),
            ], completion_status="interrupted", interruption=m.Interruption(reason="r", interrupted_at=T),
                total_usage=None),
        ],
        relationships=m.ThreadRelationships(
            links=[m.ThreadLink(thread_id="p", relation="spawned_from", metadata={"m": 1})]),
    )
    assert got == want
    # Struct equality does not tell the classes of a union apart by itself: check them.
    parts = got.turns[1].messages[1].parts
    assert [type(p) for p in parts] == [m.TextPart, m.ThinkingPart, m.ToolCallPart, m.ToolReturnPart, m.FilePart,
                                        m.ExtensionPart]
    assert [type(x) for x in got.turns[0].parts[0].content] == [str, m.ImageUrl, m.BinaryContent,
                                                                m.ExtensionContent]
    assert [type(x) for x in got.turns[1].messages] == [m.RequestMessage, m.ResponseMessage, m.SystemMessage]
    assert to_builtins(got) == FULL
    assert json.loads(to_json(got)) == FULL


def test_the_converters_are_built_once_per_struct_and_reused() -> None:
    from_builtins(FULL, m.Thread)
    built = dict(pj._compiled)
    assert set(built) >= {m.Thread, m.AgentConfig, m.UserTurn, m.AgentTurn, m.ResponseMessage, m.TextPart,
                          m.BinaryContent, m.ImageUrl, m.Usage, m.ContentRef, m.ThreadLink}
    assert m.ExtensionPart not in built and m.ExtensionContent not in built
    assert all(callable(v) for v in built.values())
    assert from_builtins(FULL, m.Thread) == from_builtins(FULL, m.Thread)
    assert all(pj._compiled[k] is v for k, v in built.items())
    assert pj._struct_converter(m.TextPart) is built[m.TextPart]


# --------------------------------------------------------------------------- type errors name the JSON type


@pytest.mark.parametrize(("value", "name"), [
    (None, "null"), ([], "array"), ("s", "string"), (True, "boolean"), (1, "integer"), (1.5, "number"),
    ((1,), "tuple"), (b"x", "bytes"),
])
def test_a_non_object_where_an_object_belongs_is_named_by_its_json_type(value: Any, name: str) -> None:
    assert str(_refused(value)) == f"Expected `object`, got `{name}` (at $)"
    err = _refused(_thread(agents=value))
    assert (str(err), err.path) == (f"Expected `object`, got `{name}` (at $.agents)", "$.agents")
    err = _refused(_thread(turns=[_agent_turn(_response(value))]))
    assert err.path == "$.turns[0].messages[0].parts[0]"
    assert str(err) == f"Expected `object`, got `{name}` (at $.turns[0].messages[0].parts[0])"


def test_a_non_array_where_an_array_of_objects_belongs() -> None:
    err = _refused(_thread(turns={"0": {}}))
    assert (str(err), err.path) == ("Expected `array`, got `object` (at $.turns)", "$.turns")
    err = _refused(_thread(turns=[_agent_turn(_response(), ), _agent_turn({"x": 1})]))
    assert err.path == "$.turns[1].messages[0]"
    assert str(err) == "Object is missing its `message_type` string (at $.turns[1].messages[0])"


def test_agent_keys_are_written_into_the_path_as_json_needs_them() -> None:
    for key, path in [("bot", "$.agents.bot"), ("agent.routing", '$.agents["agent.routing"]'),
                      ("a b", '$.agents["a b"]'), ('q"', '$.agents["q\\""]'), ("_x1", "$.agents._x1")]:
        err = _refused(_thread(agents={key: {"agent_id": "a", "created_at": T}}))
        assert err.path == path
        assert str(err) == f"Object missing required field `agent_name` (at {path})"


# --------------------------------------------------------------------------- leaves (msgspec's message, our path)


def test_a_wrongly_typed_leaf_keeps_msgspecs_message_and_gets_the_whole_path() -> None:
    _leaf_refused(_refused(_thread(title=5)), "$.title")
    err = _refused(_thread(turns=[_agent_turn(_response({"part_kind": "text", "content": 5}))]))
    _leaf_refused(err, "$.turns[0].messages[0].parts[0].content")


def test_a_leaf_error_inside_the_leaf_is_anchored_below_the_field() -> None:
    system = {"message_type": "system", "timestamp": T, "event_type": "e", "target_agents": ["a", 5]}
    err = _refused(_thread(turns=[_agent_turn(system)]))
    _leaf_refused(err, "$.turns[0].messages[0].target_agents[1]")
    err = _refused(_thread(metadata={"a": 1, 2: 3}))  # a bad key: msgspec's path is no JSON path, kept in its words
    assert isinstance(err.__cause__, msgspec.ValidationError)
    assert err.path == "$.metadata"
    assert str(err) == f"{err.__cause__} (at $.metadata)"


def test_leaves_are_converted_strictly() -> None:
    err = _refused(_thread(turns=[_agent_turn(_response(usage={"input_tokens": "3"}))]))
    _leaf_refused(err, "$.turns[0].messages[0].usage.input_tokens")
    err = _refused(_thread(turns=[_agent_turn(_response({"part_kind": "text", "content": "x", "id": 1}))]))
    _leaf_refused(err, "$.turns[0].messages[0].parts[0].id")


# --------------------------------------------------------------------------- tagged unions


def test_the_tag_must_be_a_string() -> None:
    for part in [{"content": "x"}, {"part_kind": 3, "content": "x"}, {"part_kind": None}]:
        err = _refused(part, m.MessagePart)
        assert (str(err), err.path) == ("Object is missing its `part_kind` string (at $)", "$")
    err = _refused(_thread(turns=[{"submitted_at": T, "parts": []}]))
    assert (str(err), err.path) == ("Object is missing its `turn_type` string (at $.turns[0])", "$.turns[0]")


def test_closed_unions_refuse_an_unknown_kind_naming_the_known_ones() -> None:
    err = _refused(_thread(turns=[_agent_turn({"message_type": "note", "timestamp": T})]))
    assert err.path == "$.turns[0].messages[0].message_type"
    assert str(err) == ("Unknown message_type 'note'; expected one of ['request', 'response', 'system'] "
                        "(at $.turns[0].messages[0].message_type)")
    err = _refused(_thread(turns=[{"turn_type": "bot"}]))
    assert str(err) == "Unknown turn_type 'bot'; expected one of ['agent', 'user'] (at $.turns[0].turn_type)"


def test_open_unions_keep_an_unknown_kind_whole_without_its_tag() -> None:
    part = {"part_kind": "custom:x", "part_kinds": 1, "data": {"n": None}}
    got = from_builtins(part, m.MessagePart)
    assert type(got) is m.ExtensionPart
    assert got == m.ExtensionPart(part_kind_="custom:x", data={"part_kinds": 1, "data": {"n": None}})
    assert to_builtins(got) == part
    up = from_builtins({"part_kind": "user-prompt", "content": [{"kind": "video", "part_kind": "t", "kind2": 2}]},
                       m.MessagePart)
    assert type(up.content[0]) is m.ExtensionContent
    assert up.content[0] == m.ExtensionContent(kind_="video", data={"part_kind": "t", "kind2": 2})
    assert to_builtins(up.content[0]) == {"kind": "video", "part_kind": "t", "kind2": 2}


def test_each_known_content_kind_converts_to_its_class() -> None:
    kinds = {"image-url": m.ImageUrl, "audio-url": m.AudioUrl, "video-url": m.VideoUrl,
             "document-url": m.DocumentUrl}
    content: list[Any] = [{"kind": k, "url": "u", "media_type": "x/y"} for k in kinds]
    got = from_builtins({"part_kind": "user-prompt", "content": content}, m.MessagePart)
    assert [type(c) for c in got.content] == list(kinds.values())
    assert got.content[0] == m.ImageUrl(url="u", media_type="x/y")
    err = _refused({"part_kind": "user-prompt", "content": ["a", 7]}, m.MessagePart)
    assert (str(err), err.path) == ("Expected `object`, got `integer` (at $.content[1])", "$.content[1]")
    err = _refused({"part_kind": "user-prompt", "content": [{"url": "u"}]}, m.MessagePart)
    assert str(err) == "Object is missing its `kind` string (at $.content[0])"
    err = _refused({"part_kind": "user-prompt", "content": [{"kind": "image-url"}]}, m.MessagePart)
    assert str(err) == "Object missing required field `url` (at $.content[0])"


def test_a_union_of_a_string_and_a_list_takes_either_and_names_the_string_otherwise() -> None:
    assert from_builtins({"part_kind": "user-prompt", "content": "s"}, m.MessagePart) == m.UserPromptPart(content="s")
    err = _refused({"part_kind": "user-prompt", "content": {"kind": "binary"}}, m.MessagePart)
    _leaf_refused(err, "$.content")
    _leaf_refused(_refused({"part_kind": "user-prompt", "content": 5}, m.MessagePart), "$.content")
    # RetryPromptPart.content is str | list[Any]: only leaves, so msgspec converts it whole.
    assert from_builtins({"part_kind": "retry-prompt", "content": [1, "a"]}, m.MessagePart) == m.RetryPromptPart(
        content=[1, "a"])
    _leaf_refused(_refused({"part_kind": "retry-prompt", "content": 5}, m.MessagePart), "$.content")


def test_an_optional_struct_takes_null_an_object_or_nothing_else() -> None:
    def turn(usage: Any) -> dict[str, Any]:
        return _thread(turns=[_agent_turn(total_usage=usage)])

    assert from_builtins(turn(None), m.Thread).turns[0].total_usage is None
    assert from_builtins(turn({"total_tokens": 4}), m.Thread).turns[0].total_usage == m.Usage(total_tokens=4)
    assert from_builtins(_thread(), m.Thread).relationships is m.UNSET
    _leaf_refused(_refused(turn([1])), "$.turns[0].total_usage")  # neither an object nor null
    _leaf_refused(_refused(turn("u")), "$.turns[0].total_usage")
    _leaf_refused(_refused(_thread(relationships={"links": {"thread_id": "x"}})), "$.relationships.links")
    err = _refused(_thread(relationships={"links": [{"thread_id": "x"}]}))
    assert str(err) == "Object missing required field `relation` (at $.relationships.links[0])"
    err = _refused(_thread(relationships={"links": [[]]}))
    assert str(err) == "Expected `object`, got `array` (at $.relationships.links[0])"


# --------------------------------------------------------------------------- structs


def test_a_nested_tagged_struct_must_name_its_tag_and_the_right_one() -> None:
    err = _refused({"part_kind": "file", "content": {"data": "AA==", "media_type": "a/b"}}, m.MessagePart)
    assert (str(err), err.path) == ("Object missing required field `kind` (at $.content)", "$.content")
    err = _refused({"part_kind": "file", "content": {"kind": "image-url", "data": "AA==", "media_type": "a/b"}},
                   m.MessagePart)
    assert (str(err), err.path) == ("Expected kind 'binary', got 'image-url' (at $.content.kind)", "$.content.kind")
    err = _refused({"part_kind": "file", "content": []}, m.MessagePart)
    assert str(err) == "Expected `object`, got `array` (at $.content)"


def test_a_tagged_struct_converted_directly_may_leave_its_tag_out_and_keeps_every_other_key() -> None:
    got = from_builtins({"data": "AA==", "media_type": "a/b", "x-v": 1}, m.BinaryContent)
    assert got == m.BinaryContent(data="AA==", media_type="a/b", extra={"x-v": 1})
    got = from_builtins({"kind": "binary", "data": "AA==", "media_type": "a/b", "x-v": 1}, m.BinaryContent)
    assert got == m.BinaryContent(data="AA==", media_type="a/b", extra={"x-v": 1})
    got = from_builtins({"kind": "binary", "data": "AA==", "media_type": "a/b"}, m.BinaryContent)
    assert got.extra == {}
    err = _refused({"kind": "audio-url", "data": "AA==", "media_type": "a/b"}, m.BinaryContent)
    assert (str(err), err.path) == ("Expected kind 'binary', got 'audio-url' (at $.kind)", "$.kind")


def test_unknown_keys_go_to_extra_and_only_they() -> None:
    got = from_builtins({"part_kind": "text", "content": "c", "zz": 1}, m.MessagePart)
    assert got == m.TextPart(content="c", extra={"zz": 1})
    got = from_builtins({"part_kind": "text", "content": "c", "id": "i"}, m.MessagePart)
    assert got == m.TextPart(content="c", id="i") and got.extra == {}
    got = from_builtins({"part_kind": "text", "content": "c"}, m.TextPart)
    assert got.extra == {}
    got = from_builtins({"uri": "u", "hash": "h", "extra": 1}, m.ContentRef)
    assert got == m.ContentRef(uri="u", hash="h", extra={"extra": 1})
    got = from_builtins({"input_tokens": 1, "output_tokens": 2, "thinking_tokens": 3, "total_tokens": 6}, m.Usage)
    assert got == m.Usage(input_tokens=1, output_tokens=2, thinking_tokens=3, total_tokens=6) and got.extra == {}


def test_a_missing_required_field_is_named_and_optional_ones_may_be_absent() -> None:
    err = _refused({"part_kind": "tool-call", "tool_name": "f"}, m.MessagePart)
    assert (str(err), err.path) == ("Object missing required field `tool_call_id` (at $)", "$")
    _leaf_refused(_refused({"uri": 1}, m.ContentRef), "$.uri")
    assert from_builtins({"part_kind": "tool-call", "tool_name": "f", "tool_call_id": "c"}, m.MessagePart) == (
        m.ToolCallPart(tool_name="f", tool_call_id="c"))
    err = _refused({}, m.ContentRef)
    assert str(err) == "Object missing required field `uri` (at $)"
    assert from_builtins({}, m.Usage) == m.Usage()


def test_from_builtins_starts_its_paths_where_it_is_told() -> None:
    with pytest.raises(InvalidInputError) as info:
        from_builtins({"part_kind": "text"}, m.MessagePart, path="$.parts[3]")
    assert info.value.path == "$.parts[3]"
    with pytest.raises(InvalidInputError) as info:
        from_builtins({"content": 1}, m.TextPart, path="$.p")
    assert info.value.path == "$.p.content"
    assert from_builtins({"turn_type": "user", "submitted_at": T, "parts": []}, m.Turn) == m.UserTurn(
        submitted_at=T, parts=[])


# --------------------------------------------------------------------------- from_json / to_json


def test_from_json_decodes_to_a_thread_by_default_or_to_the_type_asked() -> None:
    doc = json.dumps(FULL)
    assert from_json(doc) == from_builtins(FULL, m.Thread)
    assert from_json(doc.encode()) == from_builtins(FULL, m.Thread)
    assert from_json(b'{"part_kind": "text", "content": "c"}', m.MessagePart) == m.TextPart(content="c")
    assert from_json('{"uri": "u"}', m.ContentRef) == m.ContentRef(uri="u")


def test_from_json_refuses_text_that_is_not_json() -> None:
    for bad in [b"{", b'{"a": }', b"\xff\xfe", "[1,]"]:
        with pytest.raises(InvalidInputError) as info:
            from_json(bad)
        assert type(info.value) is InvalidInputError
        assert str(info.value).startswith("Malformed JSON: ")
        assert info.value.path is None
        assert isinstance(info.value.__cause__, msgspec.DecodeError | UnicodeDecodeError)
    with pytest.raises(InvalidInputError) as info:
        from_json(b"[]")
    assert (str(info.value), info.value.path) == ("Expected `object`, got `array` (at $)", "$")


def test_from_json_names_documents_nested_too_deeply() -> None:
    with pytest.raises(LimitExceededError) as info:
        from_json(b"[" * 100_000 + b"]" * 100_000)
    assert str(info.value) == "JSON nests too deeply to decode"
    assert isinstance(info.value.__cause__, RecursionError)


def test_to_builtins_writes_the_tag_the_fields_set_and_extra_without_overriding_fields() -> None:
    part = m.TextPart(content="c", extra={"content": "shadowed", "x": [m.UNSET, 1]})
    assert to_builtins(part) == {"part_kind": "text", "content": "c", "x": [m.UNSET, 1]}
    assert list(to_builtins(part)) == ["part_kind", "content", "x"]
    assert to_builtins(m.ContentRef(uri="u", media_type=None)) == {"uri": "u", "media_type": None}
    assert to_builtins(m.Usage()) == {}
    nested = to_builtins({"a": [m.TextPart(content="c")], "b": (1,)})
    assert nested == {"a": [{"part_kind": "text", "content": "c"}], "b": (1,)}
    assert to_builtins(m.ExtensionPart(part_kind_="k", data={"part_kind": "no", "d": 1})) == {
        "part_kind": "no", "d": 1}
    assert to_builtins(m.ExtensionContent(kind_="k", data={"d": 1})) == {"kind": "k", "d": 1}
    assert to_builtins(m.ExtensionPart(part_kind_="k", data={"d": 1})) == {"part_kind": "k", "d": 1}


def test_to_json_is_compact_unless_told_to_indent() -> None:
    part = m.TextPart(content="c", id="i")
    assert to_json(part) == b'{"part_kind":"text","content":"c","id":"i"}'
    assert to_json(part, indent=2) == b'{\n  "part_kind": "text",\n  "content": "c",\n  "id": "i"\n}'
    assert to_json({"a": [1]}, indent=1) == b'{\n "a": [\n  1\n ]\n}'
    assert to_json([part]) == b'[{"part_kind":"text","content":"c","id":"i"}]'


def test_a_conversion_that_runs_out_of_stack_is_a_limit_error() -> None:
    """Under a recursion limit raised step by step from just above the caller's depth, from_json
    first fails decoding, then converting (Python calls, about two a level), then succeeds."""
    doc = json.dumps(FULL)
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    limit = sys.getrecursionlimit()
    seen: list[str] = []
    try:
        for headroom in range(5, 300):
            try:
                sys.setrecursionlimit(depth + headroom)
            except RecursionError:  # below the current depth (not every frame is a Python frame)
                continue
            try:
                from_json(doc)
            except RecursionError:  # so low that raising the typed error overflowed too
                continue
            except LimitExceededError as exc:
                if isinstance(exc.__cause__, RecursionError):
                    seen.append(str(exc))
                    continue
                raise
            break
    finally:
        sys.setrecursionlimit(limit)
    assert "JSON nests too deeply to convert" in seen
    assert set(seen) <= {"JSON nests too deeply to decode", "JSON nests too deeply to convert"}
    assert seen == sorted(seen, key=lambda s: s.endswith("convert"))


# --------------------------------------------------------------------------- Structs other than the model's
# from_builtins converts any msgspec Struct. The model has no field of these shapes (a bare list or
# dict of leaves, a union without a leaf member, ...): these pin what the converter does with them.


class _A(msgspec.Struct, kw_only=True):
    a: int


class _Tagged(msgspec.Struct, tag_field="t", tag="x", kw_only=True):
    b: int


class _Shapes(msgspec.Struct, kw_only=True):
    tags: list[str] = []
    counts: dict[str, int] = {}
    one: Union[int, UnsetType] = UNSET
    either: Union[list[_A], _A, UnsetType] = UNSET
    content: Union[m.ImageUrl, m.AudioUrl, m.VideoUrl, m.DocumentUrl, m.BinaryContent, m.ExtensionContent,
                   UnsetType] = UNSET
    tagged: Union[_Tagged, UnsetType, None] = UNSET


def test_bare_lists_and_dicts_of_leaves_are_converted_by_msgspec_whole() -> None:
    got = from_builtins({"tags": ["a"], "counts": {"k": 1}}, _Shapes)
    assert (got.tags, got.counts) == (["a"], {"k": 1})
    err = _refused({"tags": 5}, _Shapes)
    assert (str(err), err.path) == ("Expected `array`, got `int` (at $.tags)", "$.tags")
    err = _refused({"tags": ["a", 1]}, _Shapes)
    assert (str(err), err.path) == ("Expected `str`, got `int` (at $.tags[1])", "$.tags[1]")
    err = _refused({"counts": 5}, _Shapes)
    assert (str(err), err.path) == ("Expected `object`, got `int` (at $.counts)", "$.counts")
    err = _refused({"counts": {"k": "1"}}, _Shapes)
    assert (str(err), err.path) == ("Expected `int`, got `str` (at $.counts[...])", "$.counts[...]")


def test_a_union_with_a_single_member_converts_as_that_member() -> None:
    assert from_builtins({"one": 3}, _Shapes).one == 3
    err = _refused({"one": "3"}, _Shapes)
    assert (str(err), err.path) == ("Expected `int`, got `str` (at $.one)", "$.one")


def test_a_union_of_structures_only_picks_by_shape_and_else_names_the_first() -> None:
    assert from_builtins({"either": {"a": 1}}, _Shapes).either == _A(a=1)
    assert from_builtins({"either": [{"a": 2}]}, _Shapes).either == [_A(a=2)]
    err = _refused({"either": 5}, _Shapes)
    assert (str(err), err.path) == ("Expected `array`, got `integer` (at $.either)", "$.either")
    err = _refused({"either": [{"a": "x"}]}, _Shapes)
    assert err.path == "$.either[0].a"


def test_a_union_of_exactly_the_content_kinds_dispatches_on_kind() -> None:
    got = from_builtins({"content": {"kind": "binary", "data": "AA==", "media_type": "a/b"}}, _Shapes)
    assert got.content == m.BinaryContent(data="AA==", media_type="a/b")
    got = from_builtins({"content": {"kind": "custom:k", "v": 1}}, _Shapes)
    assert got.content == m.ExtensionContent(kind_="custom:k", data={"v": 1})
    assert from_builtins({"content": "s"}, _Shapes).content == "s"


def test_an_optional_tagged_struct_must_name_its_tag() -> None:
    assert from_builtins({"tagged": {"t": "x", "b": 1}}, _Shapes).tagged == _Tagged(b=1)
    assert from_builtins({"tagged": None}, _Shapes).tagged is None
    err = _refused({"tagged": {"b": 1}}, _Shapes)
    assert (str(err), err.path) == ("Object missing required field `t` (at $.tagged)", "$.tagged")


# -------------------- round trips over generated threads (was protocol/test_json.py)

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
