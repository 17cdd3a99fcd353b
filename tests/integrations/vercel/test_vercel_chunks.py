"""tplog/integrations/vercel/chunks.py: the SSE parser, chunk fields and chat ids on the inputs a
stream can bring (issue #38's mutants)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tplog import thread_id_for
from tplog.integrations.vercel.chunks import DONE, MalformedChunkError, now, parse_sse, req_field, thread_id_for_chat


@pytest.mark.parametrize("chat_id", ["", 5, None])
def test_a_chat_id_is_a_non_empty_string(chat_id: object) -> None:
    with pytest.raises(MalformedChunkError) as err:
        thread_id_for_chat(chat_id)  # type: ignore[arg-type]
    assert repr(chat_id) in str(err.value)


def test_a_chat_id_gives_the_one_id_rule_s_thread_id() -> None:
    assert thread_id_for_chat("chat-1") == thread_id_for("chat-1")


def test_now_is_the_current_utc_time_written_with_z() -> None:
    stamp = now()
    assert stamp.endswith("Z")
    when = datetime.fromisoformat(stamp)
    assert when.tzinfo is not None and abs(when - datetime.now(UTC)) < timedelta(seconds=5)


def test_sse_bytes_are_utf8_text() -> None:
    assert list(parse_sse('data: {"type":"text-delta","delta":"é"}\n'.encode())) == [
        {"type": "text-delta", "delta": "é"}]
    with pytest.raises(MalformedChunkError) as err:
        list(parse_sse(b'data: {"a": "\xff"}\n'))
    assert "UTF-8" in str(err.value)


def test_sse_from_pieces_of_text() -> None:
    assert list(parse_sse(['data: {"type":"start"}\n', 'data: [DONE]\n'])) == [{"type": "start"}, DONE]


def test_sse_reads_only_data_lines_with_or_without_the_space() -> None:
    text = "\n".join([
        ": a comment", "event: x", ' data: {"type":"indented"}', 'Xdata: {"type":"other-field"}',
        "data:", 'data:{"type":"start"}', "data: [DONE]", 'data: {"type":"after-done"}\r', "",
    ])
    assert list(parse_sse(text)) == [{"type": "start"}, DONE, {"type": "after-done"}]


@pytest.mark.parametrize("payload", ["{" + "x" * 100, "[" + "1," * 60 + "1]"])
def test_a_bad_data_line_is_named_by_its_first_80_characters(payload: str) -> None:
    with pytest.raises(MalformedChunkError) as err:
        list(parse_sse(f"data: {payload}\n"))
    assert repr(payload[:80]) in str(err.value) and repr(payload[:81]) not in str(err.value)


def test_req_field_names_the_chunk_type_and_the_key() -> None:
    with pytest.raises(MalformedChunkError) as err:
        req_field({"type": "text-delta", "id": "t1"}, "delta")
    assert "'text-delta'" in str(err.value) and "'delta'" in str(err.value)
    with pytest.raises(MalformedChunkError) as err:
        req_field({"type": "text-delta", "id": 5}, "id")
    assert "'text-delta'" in str(err.value) and "'id'" in str(err.value)
    assert req_field({"type": "x", "input": [1]}, "input", object) == [1]
    assert req_field({"type": "x", "n": 1}, "n", (int, float)) == 1
