"""Write the golden files that pin tplog's stored event format (the one written now).

    python tools/make_golden.py            # writes tests/golden/events-v{FORMAT}.{bin,json}

``events-vN.bin`` is a msgpack list of ``{"seq", "key", "value"}`` maps: the raw
stored values (exactly as they sit in the ``events`` table) of one thread that
holds one of every event type, every message type and part kind, extension
parts and contents, unknown (``extra``) fields, explicit nulls, and both
uncompressed and zstd-compressed bodies. ``events-vN.json`` is what each value
must decode to: its header (kind, event id, recorded_at, facts, turn) and the event,
both as the protocol JSON of ``tplog.to_builtins`` and as msgspec builtins of
the stored Struct.

Run it ONCE per format version: tests/test_golden.py decodes these bytes with
the current Codec forever after. Never regenerate a version to make a test pass
(the script refuses to overwrite); a new format gets new files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tplog import (  # noqa: E402
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    LinkAdded,
    MessageRecorded,
    ThreadInfoChanged,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.backends.lmdb.keys import event_key, tkey  # noqa: E402
from tplog.codec import FORMAT, Codec, Limits  # noqa: E402
from tplog.events import ThreadDeleted  # noqa: E402
from tplog.protocol import (  # noqa: E402
    AgentConfig,
    AudioUrl,
    BinaryContent,
    ContentRef,
    DocumentUrl,
    ExtensionContent,
    ExtensionPart,
    FilePart,
    ImageUrl,
    Interruption,
    RequestMessage,
    ResponseMessage,
    RetryPromptPart,
    SystemMessage,
    TextPart,
    ThinkingPart,
    ThreadLink,
    ThreadRelationships,
    ToolCallPart,
    ToolReturnPart,
    Usage,
    UserPromptPart,
    UserTurn,
    VideoUrl,
)
from tplog.protocol.json import to_builtins  # noqa: E402

THREAD_ID = "8f14e45f-ceea-467f-a1b2-c3d4e5f60718"
RECORDED_AT = 1_737_367_200_000_000_000  # 2025-01-20T10:00:00Z in ns
OUT = ROOT / "tests" / "golden"
T = "2025-01-20T10:00:00Z"


def golden_events() -> list[Any]:
    """One thread's log touching every event type and every model branch."""
    usage = Usage(input_tokens=10, output_tokens=20, total_tokens=30, extra={"cache_read_tokens": 4})
    long_text = "The weather in Paris is sunny with a light breeze. " * 8  # compressed body
    return [
        ThreadStarted(
            thread_id=THREAD_ID, created_at=T, updated_at="2025-01-20T10:05:00Z", title="Golden",
            metadata={"project": "tplog", "n": 1, "f": 1.5, "null": None, "nested": {"a": [1, "b", False]}},
            relationships=ThreadRelationships(links=[], extra={"x-rel": "kept"}),
            extra={"x-vendor": {"k": "v"}},
        ),
        AgentRegistered(agent=AgentConfig(agent_id="main", agent_name="Main", model_name="gpt-x",
                                          provider_name="openai", created_at=T, config_ref="cfg://main",
                                          extra={"x-temperature": 0.2})),
        AgentRegistered(agent=AgentConfig(agent_id="helper", agent_name="Helper", created_at=T), key="aux"),
        UserTurnSubmitted(turn=UserTurn(
            submitted_at=T,
            parts=[
                UserPromptPart(content="What is the weather?"),
                UserPromptPart(content=[
                    "look at these",
                    ImageUrl(url="https://example.com/a.png", media_type="image/png"),
                    AudioUrl(url="https://example.com/a.mp3", force_download=True),
                    VideoUrl(url="https://example.com/a.mp4", identifier="vid"),
                    DocumentUrl(url="https://example.com/a.pdf", vendor_metadata={"pages": 3}),
                    BinaryContent(data="aGVsbG8=", media_type="text/plain", identifier="b1"),
                    ExtensionContent(kind_="custom:sticker", data={"sticker_id": 7, "pack": "cats"}),
                ]),
                ExtensionPart(part_kind_="meta:client", data={"app": "cli", "version": [1, 2]}),
            ],
            client_metadata={"ip": None, "locale": "fr-FR"},
            extra={"x-turn": True},
        )),
        AgentTurnStarted(agent_id="main", started_at=T, extra={"x-run-id": "r1"}),
        MessageRecorded(message=RequestMessage(
            timestamp=T, agent_id="main",
            parts=[UserPromptPart(content="What is the weather?"),
                   RetryPromptPart(content="bad args", tool_name="weather", tool_call_id="call-0")],
        )),
        MessageRecorded(message=ResponseMessage(
            timestamp=T, agent_id="main", model_name="gpt-x", provider_name="openai",
            provider_response_id="resp-1", usage=usage, finish_reason="tool_call",
            parts=[
                ThinkingPart(content="need the tool", signature="sig", provider_name="openai", thinking_id="th1"),
                TextPart(content="Checking.", id="txt-1"),
                ToolCallPart(tool_name="weather", tool_call_id="call-1", args={"city": "Paris", "days": 2}),
                ToolCallPart(tool_name="approve_me", tool_call_id="call-2", args='{"raw": "json text"}'),
                ToolCallPart(tool_name="noargs", tool_call_id="call-3"),
                ExtensionPart(part_kind_="custom:citation", data={"url": "https://example.com", "n": 1}),
            ],
        )),
        MessageRecorded(message=RequestMessage(
            timestamp=T, agent_id="main",
            parts=[
                ToolReturnPart(tool_name="weather", tool_call_id="call-1", status="success",
                               content={"temp": 21, "sky": "clear"}, metadata={"ms": 12}),
                ToolReturnPart(tool_name="noargs", tool_call_id="call-3", status="error", content=None,
                               content_ref=ContentRef(uri="blob://x", size_bytes=10, hash="sha256:00",
                                                      media_type="application/json")),
                FilePart(content=BinaryContent(data="AAEC", media_type="application/octet-stream"), id="f1"),
            ],
        )),
        MessageRecorded(message=ResponseMessage(timestamp=T, agent_id="main", parts=[TextPart(content=long_text)],
                                                finish_reason=None)),
        MessageRecorded(message=SystemMessage(
            timestamp=T, event_type="data-tp-thread_spawn",
            event_data={"spawned_thread_id": "11111111-2222-4333-8444-555555555555", "reason": "subtask"},
            source_agent="main", target_agents=["helper"],
        )),
        MessageRecorded(message=SystemMessage(timestamp=T, event_type="thread.spawn",
                                              event_data={"thread_id": "child-v003"})),
        MessageRecorded(message=SystemMessage(timestamp=T, event_type="meta:note", extra={"x-sys": 1})),
        AgentTurnCompleted(completed_at=T, total_usage=usage, deferred={"call-2": "approval"}),
        AgentTurnStarted(agent_id="helper", started_at=T),
        AgentTurnInterrupted(interruption=Interruption(reason="user_cancelled", interrupted_at=T,
                                                       extra={"x-by": "user"}),
                             total_usage=Usage(input_tokens=None)),
        LinkAdded(link=ThreadLink(thread_id="parent-thread", relation="spawned_from", metadata={"turn": 2},
                                  extra={"x-l": 1}), at=T),
        LinkAdded(link=ThreadLink(thread_id="other", relation="custom:inspired_by")),
        ThreadInfoChanged(title="Golden (renamed)", metadata={"project": "tplog", "tags": ["a"]},
                          updated_at="2025-01-20T11:00:00Z"),
        ThreadInfoChanged(title=None),
        ThreadDeleted(reason="retention", at="2025-01-21T00:00:00Z"),
        ThreadDeleted(),
    ]


def main() -> None:
    codec = Codec(Limits())
    tk = tkey(THREAD_ID)
    records: list[dict[str, Any]] = []
    expected: list[dict[str, Any]] = []
    for seq, ev in enumerate(golden_events(), start=1):
        eid = f"golden-{seq:03d}"
        enc = codec.encode(ev, eid, RECORDED_AT + seq)
        key = event_key(tk, seq)
        value = enc.finish(key)
        hdr = codec.header(value)
        records.append({"seq": seq, "key": key, "value": value})
        expected.append({
            "seq": seq,
            "event_id": eid,
            "kind": ev.__struct_config__.tag,
            "kind_code": hdr.kind,
            "recorded_at": hdr.recorded_at,
            "flags": value[1],
            "facts": msgspec.to_builtins(hdr.facts),
            "turn": msgspec.to_builtins(hdr.turn),  # format 3: an agent-turn boundary's fold fields
            "event": to_builtins(ev),
            "struct": msgspec.to_builtins(ev),
        })
    kinds = {e["kind"] for e in expected}
    assert len(kinds) == 10, kinds
    assert {r["value"][1] for r in records} == {0, 1}, "need both plain and compressed bodies"
    assert {r["value"][0] for r in records} == {FORMAT}
    OUT.mkdir(parents=True, exist_ok=True)
    bin_file, json_file = OUT / f"events-v{FORMAT}.bin", OUT / f"events-v{FORMAT}.json"
    if bin_file.exists() or json_file.exists():
        raise SystemExit(f"{bin_file.name} exists: golden files are written once per format, never regenerated")
    bin_file.write_bytes(msgspec.msgpack.encode(records))
    json_file.write_text(json.dumps(
        {"format": FORMAT, "thread_id": THREAD_ID, "events": expected}, indent=1, ensure_ascii=True) + "\n")
    print(f"wrote {len(records)} events to {OUT}")


if __name__ == "__main__":
    main()
