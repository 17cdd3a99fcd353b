"""``tplog.integrations.resume.Replay`` on its own: what a resumed stream gets before each frame (a
part's missing start), what it drops (a call's chunks before the call was announced), and what it
passes as it is (comments, ``[DONE]``, what is not JSON). The mutants of resume.py these kill: tests/MUTANTS.md."""

from __future__ import annotations

import json
from typing import Any

from tplog.integrations.resume import Replay


def _sse(*chunks: Any) -> str:
    return "".join(c if isinstance(c, str) else f"data: {json.dumps(c, separators=(',', ':'))}\n\n" for c in chunks)


def test_a_part_continued_without_its_start_gets_it_once() -> None:
    r = Replay()
    out = r.frames(
        _sse(
            {"type": "text-delta", "id": "t1", "delta": "a"},
            {"type": "text-delta", "id": "t1", "delta": "b"},
            {"type": "reasoning-end", "id": "r1"},
        )
    )
    assert out == _sse(
        {"type": "text-start", "id": "t1"},
        {"type": "text-delta", "id": "t1", "delta": "a"},
        {"type": "text-delta", "id": "t1", "delta": "b"},
        {"type": "reasoning-start", "id": "r1"},
        {"type": "reasoning-end", "id": "r1"},
    )
    # a later batch of the same replay: the parts are open already
    assert r.frames(_sse({"type": "text-end", "id": "t1"})) == _sse({"type": "text-end", "id": "t1"})


def test_a_part_whose_start_was_seen_is_passed_as_it_is() -> None:
    frames = _sse(
        {"type": "text-start", "id": "t1"},
        {"type": "text-delta", "id": "t1", "delta": "a"},
        {"type": "reasoning-start", "id": "r1"},
        {"type": "reasoning-delta", "id": "r1", "delta": "x"},
    )
    assert Replay().frames(frames) == frames


def test_a_calls_chunks_before_it_was_announced_are_dropped() -> None:
    r = Replay()
    out = r.frames(
        _sse(
            {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "{"},
            {"type": "tool-output-available", "toolCallId": "c2", "output": 1},
            {"type": "tool-input-available", "toolCallId": "c2", "toolName": "f", "input": {}},
            {"type": "tool-output-available", "toolCallId": "c2", "output": 2},
            {"type": "tool-input-start", "id": "c3", "toolCallId": "c3", "toolName": "g"},
            {"type": "tool-input-delta", "toolCallId": "c3", "inputTextDelta": "{"},
            {"type": "tool-approval-request", "toolCallId": "c4", "approvalId": "a"},
        )
    )
    assert out == _sse(
        {"type": "tool-input-available", "toolCallId": "c2", "toolName": "f", "input": {}},
        {"type": "tool-output-available", "toolCallId": "c2", "output": 2},
        {"type": "tool-input-start", "id": "c3", "toolCallId": "c3", "toolName": "g"},
        {"type": "tool-input-delta", "toolCallId": "c3", "inputTextDelta": "{"},
    )


def test_what_is_not_a_chunk_is_passed_as_it_is() -> None:
    frames = _sse(
        ": a comment\n\n",
        "data: [DONE]\n\n",
        "data: {not json\n\n",
        {"type": 3},
        {"type": ["text-delta"]},
        {"no": "type"},
        "event: x\ndata: {}\n\n",
    )
    assert Replay().frames(frames) == frames
