"""The README's main job: record agent runs into a local store and show what tplog derives.

Usage: python tools/demo.py [STORE_DIR]   (default ./demo-store; recreated each run)

A directory is only deleted if an earlier demo run made it (the marker file
``MARKER`` in it): the demo refuses to touch any other existing directory.

If the Pydantic AI integration is installed (``tplog[pydantic-ai]``) the runs
are real Pydantic AI runs of a scripted model (no API key); otherwise the same
conversation is recorded as history events directly. Either way it records:
a multi-turn conversation, a run that spawns a child thread, a run interrupted
mid-stream, and a run that ends waiting for a tool approval; then prints the
turns, interrupt state, pending tool calls, spawned children and canonical
hashes.
"""

from __future__ import annotations

import shutil
import sys
import uuid
from pathlib import Path

import tplog
from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    LinkAdded,
    MessageRecorded,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.protocol import model as m
from tplog.protocol.canonical import thread_hash
from tplog.store import Store

AGENT = "7d9f3c2e-0000-4000-8000-000000000001"
MARKER = ".made-by-tplog-demo"
T0 = "2025-01-20T10:00:00Z"


def ts(sec: int) -> str:
    return f"2025-01-20T10:{sec // 60:02d}:{sec % 60:02d}Z"


def user(sec: int, text: str) -> UserTurnSubmitted:
    return UserTurnSubmitted(turn=m.UserTurn(submitted_at=ts(sec), parts=[m.UserPromptPart(content=text)]))


def response(sec: int, *parts: m.MessagePart) -> MessageRecorded:
    return MessageRecorded(message=m.ResponseMessage(timestamp=ts(sec), agent_id=AGENT, parts=list(parts),
                                                     model_name="scripted", provider_name="demo",
                                                     usage=m.Usage(input_tokens=20, output_tokens=8)))


def request(sec: int, *parts: m.MessagePart) -> MessageRecorded:
    return MessageRecorded(message=m.RequestMessage(timestamp=ts(sec), agent_id=AGENT, parts=list(parts)))


def record_scripted(store: Store) -> tuple[str, str]:
    root = str(uuid.uuid4())
    child = str(uuid.uuid4())
    agent = m.AgentConfig(agent_id=AGENT, agent_name="weather-bot", model_name="scripted", created_at=T0)
    store.append(root, [ThreadStarted(thread_id=root, created_at=T0, title="Weather in Europe"),
                        AgentRegistered(agent=agent)], expected_version="no_stream")
    # Run 1: a tool cycle, then an answer.
    store.append(root, [
        user(1, "What's the weather in Paris?"),
        AgentTurnStarted(agent_id=AGENT, started_at=ts(2)),
        request(2, m.UserPromptPart(content="What's the weather in Paris?")),
        response(3, m.ToolCallPart(tool_name="get_weather", tool_call_id="call_1", args={"city": "Paris"})),
        request(4, m.ToolReturnPart(tool_name="get_weather", tool_call_id="call_1", status="success",
                                    content={"temp_c": 21})),
        response(5, m.TextPart(content="It is 21 °C in Paris.")),
        AgentTurnCompleted(completed_at=ts(6), total_usage=m.Usage(input_tokens=40, output_tokens=16)),
    ])
    # Run 2: spawns a child thread to research Berlin.
    store.append(root, [
        user(10, "And Berlin? Research it in a sub-thread."),
        AgentTurnStarted(agent_id=AGENT, started_at=ts(11)),
        MessageRecorded(message=m.SystemMessage(timestamp=ts(12), event_type=m.THREAD_SPAWN,
                                                event_data={"spawned_thread_id": child}, source_agent=AGENT)),
        response(13, m.TextPart(content="I started a sub-thread for Berlin.")),
        AgentTurnCompleted(completed_at=ts(14)),
    ])
    store.append(child, [ThreadStarted(thread_id=child, created_at=ts(12), title="Berlin research"),
                         AgentRegistered(agent=agent),
                         LinkAdded(link=m.ThreadLink(thread_id=root, relation="spawned_from"), at=ts(12))])
    # Run 3: interrupted mid-stream after a complete tool cycle; the cut-off response is not recorded.
    store.append(root, [
        user(20, "Compare Paris and Berlin."),
        AgentTurnStarted(agent_id=AGENT, started_at=ts(21)),
        response(22, m.ToolCallPart(tool_name="get_weather", tool_call_id="call_2", args={"city": "Berlin"})),
        request(23, m.ToolReturnPart(tool_name="get_weather", tool_call_id="call_2", status="success",
                                     content={"temp_c": 17})),
        AgentTurnInterrupted(interruption=m.Interruption(reason="user_cancelled", interrupted_at=ts(24))),
    ])
    # Run 4: ends waiting for approval of a deferred tool call.
    store.append(root, [
        user(30, "Book me a train to Berlin."),
        AgentTurnStarted(agent_id=AGENT, started_at=ts(31)),
        response(32, m.ToolCallPart(tool_name="book_train", tool_call_id="call_3", args={"to": "Berlin"})),
        AgentTurnCompleted(completed_at=ts(33), deferred={"call_3": "approval"}),
    ])
    return root, child


def record(store: Store) -> tuple[str, str, str]:
    try:
        from tplog.integrations import demo as pai_demo  # type: ignore[attr-defined]
    except ImportError:
        return (*record_scripted(store), "scripted history events (install tplog[pydantic-ai] for real runs)")
    root, child = pai_demo.record(store)
    return root, child, "real Pydantic AI runs of a scripted FunctionModel"


def main() -> int:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-store")
    if path.exists():
        if not (path / MARKER).is_file() and (not path.is_dir() or any(path.iterdir())):
            sys.stderr.write(f"error: {path} exists and was not made by the demo; remove it yourself or "
                             "pass another directory (python tools/demo.py DIR)\n")
            return 2
        shutil.rmtree(path)
    path.mkdir(parents=True)
    (path / MARKER).write_text("made by tools/demo.py: `make demo` deletes and recreates this directory\n")
    with Store(path) as store:
        root, child, how = record(store)
        print(f"tplog {tplog.__version__}: recorded {how} into {path}/\n")
        thread = store.thread(root)
        print(f"Thread {root} ({thread.title}): {len(thread.turns)} canonical turns")
        for i, turn in enumerate(thread.turns):
            if isinstance(turn, m.UserTurn):
                text = turn.parts[0].content if isinstance(turn.parts[0], m.UserPromptPart) else "…"
                print(f"  [{i}] user   {text}")
            else:
                status = turn.completion_status
                if isinstance(turn.interruption, m.Interruption):
                    status = f"{status} ({turn.interruption.reason} at {turn.interruption.interrupted_at})"
                print(f"  [{i}] agent  {len(turn.messages)} messages, {status}")
        intr = store.interrupts(root)
        print(f"\nInterrupts: {len(intr.facts)} recorded; last: turn {intr.last.turn} {intr.last.reason}"
              if intr.last else "\nInterrupts: none")
        pend = store.pending(root)
        print("Pending tool calls: " + (", ".join(f"{c.tool_name} ({c.tool_call_id}, {c.state}, {c.kind})"
                                                  for c in pend.pending) or "none"))
        print(f"Children of the root: {store.children(root)}")
        print(f"Child {child} links: {[(lk.relation, lk.thread_id) for lk in store.links(child)]}")
        print(f"\nCanonical hash of the root: {thread_hash(thread)}")
        stats = store.stats()
        print(f"Store: {stats['events']} events in {stats['threads']} threads, {stats['file_bytes']} bytes on disk")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
