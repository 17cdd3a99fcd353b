"""``history_from_thread`` builds Pydantic AI messages directly; the validating path is the reference.

Every recorded fixture, the imported histories and a slice of the benchmark corpus
are converted both ways and must dump to the same JSON; the direct path must carry
the common shapes (or the speed-up silently disappears); and a ``HistoryCache``
converts only what was appended since the last call.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest
from integ_helpers import FIXTURE_FILES, load_fixture
from pydantic_ai import messages as pm
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.usage import RequestUsage

from tplog import InvalidInputError, Store
from tplog.integrations import pydantic_ai_fast as _pai_fast
from tplog.integrations.pydantic_ai import (
    HistoryCache,
    events_from_messages,
    history_from_thread,
    load_history,
    message_to_tp,
    request_from_user_turn,
)
from tplog.integrations.pydantic_ai.mapping import _message_validated
from tplog.projections.fold import fold
from tplog.protocol import model as m

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: benchmarks/
from benchmarks._data import make_corpus

FIXTURES = {p.stem: p for p in FIXTURE_FILES}


def _reference(thread: m.Thread, viewing_agent_id: str | None = None) -> list[pm.ModelMessage]:
    """The validating path for every message (what history_from_thread did before)."""
    out: list[pm.ModelMessage] = []
    for turn in thread.turns:
        if isinstance(turn, m.UserTurn):
            out.append(request_from_user_turn(turn))
            continue
        other = viewing_agent_id is not None and turn.agent_id != viewing_agent_id
        for msg in turn.messages:
            if isinstance(msg, m.SystemMessage):
                continue
            drop = other and msg.agent_id != viewing_agent_id
            if drop and all(isinstance(p, m.ThinkingPart) for p in msg.parts):
                continue
            out.append(_message_validated(msg, drop))
    return out


def _dump(msgs: list[pm.ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(msgs)


def _untimed(msgs: list[pm.ModelMessage]) -> list[Any]:
    out = ModelMessagesTypeAdapter.dump_python(msgs, mode="json")
    for d in out:
        for p in d["parts"]:
            p.pop("timestamp", None)
    return out


def _threads() -> list[tuple[str, m.Thread]]:
    out = []
    for name, path in sorted(FIXTURES.items()):
        fx = load_fixture(path)
        th = fold(fx["events"]).thread
        assert th is not None
        out.append((f"recorded:{name}", th))
        msgs = ModelMessagesTypeAdapter.validate_python(fx["history"])
        th = fold(events_from_messages(msgs, agent_id="agent-1", thread_id="imported")).thread
        assert th is not None
        out.append((f"imported:{name}", th))
    return out


THREADS = _threads()


@pytest.mark.parametrize(("name", "thread"), THREADS, ids=[n for n, _ in THREADS])
def test_direct_history_equals_the_validating_path(name: str, thread: m.Thread) -> None:
    fast = history_from_thread(thread)
    assert _dump(fast) == _dump(_reference(thread))
    assert fast == _reference(thread)
    agents = {t.agent_id for t in thread.turns if isinstance(t, m.AgentTurn)} | {"someone-else"}
    for viewer in sorted(agents):
        assert _dump(history_from_thread(thread, viewer)) == _dump(_reference(thread, viewer)), viewer


def test_direct_path_carries_the_common_shapes() -> None:
    """Recorded runs (part timestamps, run ids, raw args, failed tools, usage) take the direct path."""
    direct = total = 0
    for _, thread in THREADS:
        for turn in thread.turns:
            msgs = [turn] if isinstance(turn, m.UserTurn) else [x for x in turn.messages if not isinstance(
                x, m.SystemMessage)]
            for msg in msgs:
                total += 1
                built = _pai_fast.fast_user_turn(msg) if isinstance(msg, m.UserTurn) else _pai_fast.fast_message(msg)
                direct += built is not None
    assert total > 100
    assert direct / total > 0.9, (direct, total)


def test_benchmark_corpus_history_is_equal_and_direct() -> None:
    for t in make_corpus(12, seed=7, cache=False).threads:
        th = fold(t.events).thread
        assert th is not None
        # The generator's request parts carry no timestamp: Pydantic AI stamps them now, on either path.
        assert _untimed(history_from_thread(th)) == _untimed(_reference(th))
        for turn in th.turns:
            if isinstance(turn, m.AgentTurn):
                for msg in turn.messages:
                    if not isinstance(msg, m.SystemMessage):
                        assert _pai_fast.fast_message(msg) is not None, msg


def _odd_message() -> m.ResponseMessage:
    return m.ResponseMessage(
        timestamp="2025-06-01T10:00:00Z",
        agent_id="a",
        parts=[
            m.TextPart(content="x", extra={"pydantic_ai": {"citations": None, "provider_name": "p"}}),
            m.ToolCallPart(tool_name="t", tool_call_id="c1", args={"q": 1}, extra={"pydantic_ai": {"tool_kind": None}}),
        ],
        usage=m.Usage(input_tokens=3, output_tokens=4, thinking_tokens=1, extra={"cache_read_tokens": 2}),
        extra={"pydantic_ai": {"run_id": "r", "provider_details": {"k": [1, 2]}, "model_id": "mid"}},
    )


def test_shapes_outside_the_direct_path_fall_back_with_equal_results() -> None:
    msg = _odd_message()
    assert _pai_fast.fast_message(msg) is None  # `citations` and `tool_kind` leftovers: validating path
    th = m.Thread(
        version="0.0.4", thread_id="t", created_at="2025-06-01T10:00:00Z", updated_at="2025-06-01T10:00:00Z", agents={},
        turns=[m.AgentTurn(agent_id="a", started_at="2025-06-01T10:00:00Z", messages=[msg])],
    )
    assert _dump(history_from_thread(th)) == _dump(_reference(th))
    plain = m.ResponseMessage(
        timestamp="2025-06-01T10:00:00Z", agent_id="a", parts=[m.TextPart(content="x")],
        usage=m.Usage(input_tokens=3, output_tokens=4, thinking_tokens=1, extra={"cache_read_tokens": 2}),
        extra={"pydantic_ai": {"run_id": "r", "provider_details": {"k": [1, 2]}, "model_id": "mid"}},
    )
    built = _pai_fast.fast_message(plain)
    assert built is not None
    assert _dump([built]) == _dump([_message_validated(plain, False)])
    assert json.loads(_dump([built]))[0]["usage"]["output_reasoning_tokens"] == 1


def test_history_cache_converts_only_new_messages(tmp_path: Path) -> None:
    fx = load_fixture(FIXTURES["multi_turn"] if "multi_turn" in FIXTURES else FIXTURE_FILES[0])
    events = fx["events"]
    tid = next(e.thread_id for e in events if type(e).__name__ == "ThreadStarted")
    cut = max(i for i, e in enumerate(events) if type(e).__name__ == "MessageRecorded")
    cache = HistoryCache()
    with Store(tmp_path / "s", durability="relaxed", check_rules=False) as store:
        store.append(tid, events[:cut])
        first = load_history(store, tid, cache=cache)
        assert cache.hits == 0 and cache.misses == len(first) > 0
        again = load_history(store, tid, cache=cache)
        assert again == first and again is not first
        assert cache.misses == len(first) and cache.hits == len(first)
        store.append(tid, events[cut:])
        hits, misses = cache.hits, cache.misses
        full = load_history(store, tid, cache=cache)
        assert _dump(full) == _dump(_reference(store.thread(tid)))
        assert cache.misses - misses <= 2  # the new message (and a turn re-folded around it), not the whole thread
        assert cache.hits - hits >= len(first) - 2


def test_history_cache_is_bounded_and_checks_its_argument() -> None:
    cache = HistoryCache(max_messages=3)
    th = THREADS[0][1]
    history_from_thread(th, cache=cache)
    assert len(cache) <= 3
    with pytest.raises(InvalidInputError, match="max_messages"):
        HistoryCache(max_messages=-1)
    off = HistoryCache(max_messages=0)
    history_from_thread(th, cache=off)
    assert len(off) == 0




def test_tool_return_content_with_multimodal_items_is_rebuilt_as_pydantic_does() -> None:
    content = {"items": [{"kind": "image-url", "url": "https://example.com/a.png", "media_type": "image/png"}], "n": 1}
    msg = m.RequestMessage(
        timestamp="2025-06-01T10:00:00Z",
        agent_id="a",
        parts=[m.ToolReturnPart(tool_name="t", tool_call_id="c1", status="success", content=content,
                                extra={"pydantic_ai": {"timestamp": "2025-06-01T10:00:01Z"}})],
    )
    assert _pai_fast.fast_message(msg) is None  # a mapping with a `kind`: the validating path decides
    th = m.Thread(
        version="0.0.4", thread_id="t", created_at="2025-06-01T10:00:00Z", updated_at="2025-06-01T10:00:00Z", agents={},
        turns=[m.AgentTurn(agent_id="a", started_at="2025-06-01T10:00:00Z", messages=[msg])],
    )
    assert _dump(history_from_thread(th)) == _dump(_reference(th))
    plain = msgspec.structs.replace(
        msg, parts=[msgspec.structs.replace(msg.parts[0], content={"n": [1, {"a": "b"}]}, extra={
            "pydantic_ai": {"timestamp": "2025-06-01T10:00:01Z", "content_file_digests": []}})]
    )
    built = _pai_fast.fast_message(plain)
    assert built is not None
    assert _dump([built]) == _dump([_message_validated(plain, False)])


# --------------------------------------------------------------------------- recording: Pydantic AI -> protocol


def _slow_to_tp(msg: pm.ModelMessage, default_timestamp: str) -> Any:
    """message_to_tp's pydantic-dump path, with the direct path switched off."""
    orig = _pai_fast.fast_message_to_tp
    _pai_fast_mod = sys.modules["tplog.integrations.pydantic_ai.mapping"]
    _pai_fast_mod.fast_message_to_tp = lambda *a: None  # type: ignore[attr-defined]
    try:
        return message_to_tp(msg, "agent-1", default_timestamp=default_timestamp)
    finally:
        _pai_fast_mod.fast_message_to_tp = orig  # type: ignore[attr-defined]


def _pai_histories() -> list[tuple[str, list[pm.ModelMessage]]]:
    out = [(f"fixture:{n}", ModelMessagesTypeAdapter.validate_python(load_fixture(p)["history"]))
           for n, p in sorted(FIXTURES.items())]
    for t in make_corpus(8, seed=11, cache=False).threads:
        th = fold(t.events).thread
        assert th is not None
        out.append((f"corpus:{t.thread_id}", history_from_thread(th)))
    return out


PAI_HISTORIES = _pai_histories()


@pytest.mark.parametrize(("name", "msgs"), PAI_HISTORIES, ids=[n for n, _ in PAI_HISTORIES])
def test_direct_recording_equals_the_dump_path(name: str, msgs: list[pm.ModelMessage]) -> None:
    """Byte-equal protocol messages (leftover fields in the same order: stored bytes and hashes stay)."""
    enc = msgspec.msgpack.encode
    for msg in msgs:
        if any(getattr(p, "part_kind", None) == "system-prompt" for p in msg.parts) and len(msg.parts) == 1:
            continue
        fast = message_to_tp(msg, "agent-1", default_timestamp="2025-01-01T00:00:00Z")
        slow = _slow_to_tp(msg, "2025-01-01T00:00:00Z")
        assert enc(fast) == enc(slow), (name, msg)


def test_direct_recording_covers_recorded_runs() -> None:
    assert _pai_fast.RECORDING_FAST  # the pinned Pydantic AI's fields are the ones the mapping knows
    direct = total = 0
    for _, msgs in PAI_HISTORIES:
        for msg in msgs:
            total += 1
            direct += _pai_fast.fast_message_to_tp(msg, "a", lambda d: "x", lambda: "y") is not None
    assert direct / total > 0.85, (direct, total)


# Message shapes one at a time: each leftover field, status and part kind the direct path takes, and
# each it leaves to the validating path. P is the leftover namespace the recorder keeps.
P = _pai_fast.PAI_KEY
TS = "2025-06-01T10:00:00Z"


def _req(*parts: Any, **kw: Any) -> m.RequestMessage:
    return m.RequestMessage(timestamp=kw.pop("timestamp", TS), agent_id="a", parts=list(parts), **kw)


def _resp(*parts: Any, **kw: Any) -> m.ResponseMessage:
    return m.ResponseMessage(timestamp=kw.pop("timestamp", TS), agent_id="a", parts=list(parts), **kw)


def _ret(**kw: Any) -> m.ToolReturnPart:
    return m.ToolReturnPart(tool_name="t", tool_call_id="c1", **{"status": "success", "content": "ok", **kw})


DIRECT: dict[str, Any] = {
    "request leftovers, timestamp None": _req(m.UserPromptPart(content="hi"),
                                              extra={P: {"timestamp": None, "run_id": "r"}}),
    "prompt timestamp": _req(m.UserPromptPart(content="hi", extra={P: {"timestamp": "2025-06-01T09:00:00Z"}})),
    "tool error": _req(_ret(status="error")),
    "tool outcome, timestamp": _req(_ret(extra={P: {"outcome": "denied", "timestamp": TS,
                                                    "content_file_digests": []}})),
    "tool metadata": _req(_ret(metadata={"k": 1})),
    "tool no content": _req(m.ToolReturnPart(tool_name="t", tool_call_id="c1", status="success")),
    "retried tool": _req(m.RetryPromptPart(content="again", tool_name="t", tool_call_id="c1",
                                           extra={P: {"timestamp": TS, "outcome": "retried"}})),
    "retried tool without id": _req(m.RetryPromptPart(content="again", tool_name="t")),
    "text id, provider": _resp(m.TextPart(content="x", id="t1", extra={P: {"provider_name": "p",
                                                                           "provider_details": {"a": 1}}})),
    "call raw args, id": _resp(m.ToolCallPart(tool_name="t", tool_call_id="c", args={"a": 1},
                                              extra={P: {"args": '{"a": 1}', "id": "i", "provider_name": "p"}})),
    "call without args": _resp(m.ToolCallPart(tool_name="t", tool_call_id="c")),
    "thinking, all fields": _resp(m.ThinkingPart(content="hmm", signature="sig", thinking_id="th", provider_name="p",
                                                 extra={P: {"provider_details": {"x": 1}}})),
    "thinking empty": _resp(m.ThinkingPart(provider_name="")),
    "response fields, usage details": _resp(
        m.TextPart(content="x"), model_name="gpt", provider_name="openai", provider_response_id="r1",
        finish_reason="stop", usage=m.Usage(input_tokens=1, output_tokens=2,
                                            extra={"details": {"a": 1}, "cache_read_tokens": 3})),
    "response timestamp leftover": _resp(m.TextPart(content="x"),
                                         extra={P: {"timestamp": "2025-06-01T11:00:00Z", "model_id": "m"}}),
}

FALLBACK: dict[str, Any] = {  # accepted by Pydantic AI's validation, outside the direct path
    "request leftover unknown": _req(m.UserPromptPart(content="hi"), extra={P: {"colour": 1}}),
    "prompt leftover unknown": _req(m.UserPromptPart(content="hi", extra={P: {"timestamp": TS, "x": 1}})),
    "multimodal prompt": _req(m.UserPromptPart(content=["a", "b"])),
    "tool status denied": _req(_ret(status="denied")),
    "tool leftover unknown": _req(_ret(extra={P: {"zzz": 1}})),
    "tool content with a kind": _req(_ret(content={"kind": "x"})),
    "retry without a tool": _req(m.RetryPromptPart(content="again")),
    "call leftover tool_kind": _resp(m.ToolCallPart(tool_name="t", tool_call_id="c", args={},
                                                    extra={P: {"tool_kind": "x"}})),
    "usage flag not a count": _resp(m.TextPart(content="x"),
                                    usage=m.Usage(input_tokens=1, extra={"cache_read_tokens": True})),
}

REFUSED: dict[str, Any] = {  # Pydantic AI's validation refuses them: the direct path must not accept them
    "request timestamp not a time": _req(m.UserPromptPart(content="hi"), timestamp="yesterday"),
    "leftovers not an object": _req(m.UserPromptPart(content="hi"), extra={P: "x"}),
    "retry leftover outcome": _req(m.RetryPromptPart(content="again", tool_name="t", extra={P: {"outcome": "x"}})),
    "response part in a request": _req(m.TextPart(content="x")),
    "text leftover not a string": _resp(m.TextPart(content="x", extra={P: {"provider_name": 1}})),
    "call args a list": _resp(m.ToolCallPart(tool_name="t", tool_call_id="c", args=[1, 2])),
    "thinking details not an object": _resp(m.ThinkingPart(content="h", provider_name="p",
                                                           extra={P: {"provider_details": 3}})),
    "usage details not counts": _resp(m.TextPart(content="x"), usage=m.Usage(extra={"details": {"a": "b"}})),
    "usage tokens not an int": _resp(m.TextPart(content="x"), usage=m.Usage(input_tokens=1.5)),  # type: ignore[arg-type]
    "response leftover not a string": _resp(m.TextPart(content="x"), extra={P: {"model_id": 5}}),
    "request part in a response": _resp(m.UserPromptPart(content="x")),
}


def _comparable(msgs: list[pm.ModelMessage]) -> list[Any]:
    """Without what Pydantic AI makes up on each call: part timestamps and missing tool call ids."""
    out = _untimed(msgs)
    for d in out:
        for p in d["parts"]:
            if str(p.get("tool_call_id", "")).startswith("pyd_ai_"):
                p["tool_call_id"] = "generated"
    return out


@pytest.mark.parametrize("name", list(DIRECT))
def test_each_direct_shape_equals_the_validating_path(name: str) -> None:
    msg = DIRECT[name]
    built = _pai_fast.fast_message(msg)
    assert built is not None, name
    assert _comparable([built]) == _comparable([_message_validated(msg, False)])


@pytest.mark.parametrize("name", list(FALLBACK))
def test_each_other_shape_falls_back_to_the_validating_path(name: str) -> None:
    msg = FALLBACK[name]
    assert _pai_fast.fast_message(msg) is None
    th = m.Thread(version="0.0.4", thread_id="t", created_at=TS, updated_at=TS, agents={},
                  turns=[m.AgentTurn(agent_id="a", started_at=TS, messages=[msg])])
    assert _comparable(history_from_thread(th)) == _comparable([_message_validated(msg, False)])


@pytest.mark.parametrize("name", list(REFUSED))
def test_the_direct_path_accepts_nothing_the_validating_path_refuses(name: str) -> None:
    msg = REFUSED[name]
    assert _pai_fast.fast_message(msg) is None
    with pytest.raises(ValueError):  # pydantic's ValidationError among them
        _message_validated(msg, False)


# Recording, one Pydantic AI shape at a time: what the direct path builds is byte-equal to the dump path's.
T0 = datetime(2025, 6, 1, 10, 0, tzinfo=UTC)


def _ask(*parts: Any, **kw: Any) -> pm.ModelRequest:
    return pm.ModelRequest(parts=list(parts), **{"timestamp": T0, **kw})


def _answer(*parts: Any, **kw: Any) -> pm.ModelResponse:
    return pm.ModelResponse(parts=list(parts), **{"timestamp": T0, **kw})


def _tret(content: Any = "ok", **kw: Any) -> pm.ToolReturnPart:
    return pm.ToolReturnPart(tool_name="t", content=content, tool_call_id="c1", timestamp=T0, **kw)


def _call(args: Any, **kw: Any) -> pm.ToolCallPart:
    return pm.ToolCallPart(tool_name="t", args=args, tool_call_id="c1", **kw)


RECORD_DIRECT: dict[str, Any] = {
    "request leftovers, no timestamp": _ask(pm.UserPromptPart(content="hi", timestamp=T0), timestamp=None,
                                            run_id="r", conversation_id="cv", metadata={"k": [1]}),
    "tool failed, object content, metadata": _ask(_tret({"rows": [1, 2]}, outcome="failed", metadata={"m": 1})),
    "tool denied": _ask(_tret(None, outcome="denied")),
    "text with provider": _answer(pm.TextPart(content="x", id="t1", provider_name="p", provider_details={"a": 1})),
    "call with ids, details": _answer(_call({"a": 1}, id="i", provider_name="p", provider_details={"d": 2})),
    "call raw JSON args": _answer(_call('{"a": 1}')),
    "call empty args": _answer(_call("")),
    "call args not an object": _answer(_call("[1, 2]")),
    "call args not JSON": _answer(_call("{not json")),
    "call no args": _answer(_call(None)),
    "thinking, all fields": _answer(pm.ThinkingPart(content="h", id="th", signature="s", provider_name="",
                                                    provider_details={"x": 1})),
    "response leftovers, usage": _answer(
        pm.TextPart(content="x"), model_name="gpt", provider_name="openai", provider_response_id="r1",
        finish_reason="stop", model_id="mid", run_id="r", metadata={"m": 1}, provider_details={"p": [1]},
        usage=RequestUsage(input_tokens=3, output_tokens=4, output_reasoning_tokens=1, cache_read_tokens=2,
                           details={"reasoning": 1})),
    "usage none at all": _answer(pm.TextPart(content="x"), usage=RequestUsage()),
}

RECORD_FALLBACK: dict[str, Any] = {
    "multimodal prompt": _ask(pm.UserPromptPart(content=["a", "b"], timestamp=T0)),
    "tool content with a kind": _ask(_tret({"kind": "x"})),
    "tool content not JSON": _ask(_tret({"at": T0})),
    "tool content a tuple": _ask(_tret([(1, 2)])),
    "tool retried": _ask(_tret("again", outcome="retried")),
    "tool kind": _ask(_tret("ok", tool_kind="output")),
    "retry feedback": ModelMessagesTypeAdapter.validate_python([{  # an old retry prompt naming no tool
        "kind": "request", "parts": [{"part_kind": "retry-prompt", "content": "again", "timestamp": T0}]}])[0],
    "incomplete request": _ask(pm.UserPromptPart(content="hi", timestamp=T0), state="interrupted"),
    "text with citations": _answer(pm.TextPart(content="x", citations=[])),
    "call kind": _answer(_call({}, tool_kind="output")),
    "file part": _answer(pm.FilePart(content=pm.BinaryContent(data=b"hi", media_type="image/png"))),
    "usage with a cost": _answer(pm.TextPart(content="x"), usage=RequestUsage(input_tokens=1, cost=Decimal("0.5"))),
    "incomplete response": _answer(pm.TextPart(content="x"), state="interrupted"),
}


@pytest.mark.parametrize("name", [*RECORD_DIRECT, *RECORD_FALLBACK])
def test_each_recorded_shape_is_byte_equal_on_both_paths(name: str) -> None:
    msg = RECORD_DIRECT.get(name) or RECORD_FALLBACK[name]
    direct = _pai_fast.fast_message_to_tp(msg, "agent-1", lambda d: d.isoformat(), lambda: "x")
    assert (direct is not None) == (name in RECORD_DIRECT)  # which path it takes
    fast = message_to_tp(msg, "agent-1", default_timestamp="2025-01-01T00:00:00Z")
    slow = _slow_to_tp(msg, "2025-01-01T00:00:00Z")
    assert msgspec.msgpack.encode(fast) == msgspec.msgpack.encode(slow)
