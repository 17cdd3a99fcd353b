"""The valid documents and event lists the protocol's tests break one rule at a time.

``base()`` is a valid v0.0.4 thread using every part of the protocol the rules look at (``base_v3()``
the same conversation in v0.0.3); ``findings`` lists a document's findings as (severity, rule, path).
``_agent_turn``, ``_user_answer`` and ``_new_thread_events`` build history events for appends. Shared
with the backends', the fold's and the PostgreSQL recorder's tests (``from protocol.documents import ...``:
tests/ is on ``sys.path``, and tests/protocol has no ``__init__.py``).
"""

from __future__ import annotations

from typing import Any

from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    MessageRecorded,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins
from tplog.protocol.validate import RULES, validate

__all__ = ["A1", "A2", "MSG", "T0", "T1", "T2", "T3", "TURN1", "E", "Found", "W", "_agent_turn", "_new_thread_events",
           "_user_answer", "base", "base_v3", "findings", "ts"]

T1 = "550e8400-e29b-41d4-a716-446655440000"  # the thread
T2 = "550e8400-e29b-41d4-a716-446655440001"  # a spawned thread
T3 = "550e8400-e29b-41d4-a716-446655440002"  # the thread this one was spawned from
A1 = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
A2 = "16fd2706-8baf-433b-82eb-8c7fada847da"


def base() -> dict[str, Any]:
    """A valid v0.0.4 thread using every part of the protocol the rules look at."""
    return {
        "version": "0.0.4",
        "thread_id": T1,
        "created_at": "2025-01-20T10:00:00Z",
        "updated_at": "2025-01-20T10:00:40Z",
        "title": "weather",
        "agents": {
            A1: {"agent_id": A1, "agent_name": "planner", "created_at": "2025-01-01T00:00:00Z"},
            A2: {"agent_id": A2, "agent_name": "researcher", "created_at": "2025-01-01T00:00:00+01:00"},
        },
        "relationships": {"links": [{"thread_id": T3, "relation": "spawned_from"}]},
        "turns": [
            {  # 0
                "turn_type": "user",
                "submitted_at": "2025-01-20T10:00:00Z",
                "parts": [
                    {
                        "part_kind": "user-prompt",
                        "content": [
                            "What's the weather where this photo was taken?",
                            {"kind": "image-url", "url": "https://example.com/p.png", "identifier": "img_1"},
                        ],
                    }
                ],
                "client_metadata": {"ui:mode": "creative", "session_id": "abc", "app/feature": True},
            },
            {  # 1
                "turn_type": "agent",
                "agent_id": A1,
                "started_at": "2025-01-20T10:00:01Z",
                "completed_at": "2025-01-20T10:00:10Z",
                "completion_status": "complete",
                "messages": [
                    {  # 0
                        "message_type": "response",
                        "timestamp": "2025-01-20T10:00:02Z",
                        "agent_id": A1,
                        "model_name": "claude",
                        "finish_reason": "tool_call",
                        "parts": [
                            {"part_kind": "thinking", "content": "Paris?", "provider_name": "anthropic"},
                            {"part_kind": "text", "content": "Let me check."},
                            {
                                "part_kind": "tool-call",
                                "tool_name": "get_weather",
                                "tool_call_id": "call_1",
                                "args": {"city": "Paris"},
                            },
                        ],
                    },
                    {  # 1
                        "message_type": "request",
                        "timestamp": "2025-01-20T10:00:03Z",
                        "agent_id": A1,
                        "parts": [
                            {
                                "part_kind": "tool-return",
                                "tool_name": "get_weather",
                                "tool_call_id": "call_1",
                                "status": "success",
                                "content": {"temp": "72F"},
                            }
                        ],
                    },
                    {  # 2
                        "message_type": "system",
                        "timestamp": "2025-01-20T10:00:04Z",
                        "event_type": "data-tp-thread_spawn",
                        "event_data": {"spawned_thread_id": T2},
                        "source_agent": A1,
                        "target_agents": [A2],
                    },
                    {  # 3
                        "message_type": "response",
                        "timestamp": "2025-01-20T10:00:05Z",
                        "agent_id": A1,
                        "finish_reason": "tool_call",
                        "parts": [
                            {"part_kind": "custom:planning-step", "step_id": "plan_42"},
                            {
                                "part_kind": "tool-call",
                                "tool_name": "generate_report",
                                "tool_call_id": "call_2",
                                "args": "{}",
                            },
                        ],
                    },
                    {  # 4
                        "message_type": "request",
                        "timestamp": "2025-01-20T10:00:07Z",
                        "agent_id": A1,
                        "parts": [
                            {
                                "part_kind": "tool-return",
                                "tool_name": "generate_report",
                                "tool_call_id": "call_2",
                                "status": "success",
                                "content_ref": {"uri": "s3://reports/2025/r.pdf", "media_type": "application/pdf"},
                            }
                        ],
                    },
                    {  # 5
                        "message_type": "response",
                        "timestamp": "2025-01-20T10:00:09Z",
                        "agent_id": A1,
                        "finish_reason": "stop",
                        "parts": [{"part_kind": "text", "content": "It is 72F."}],
                    },
                ],
            },
            {  # 2
                "turn_type": "user",
                "submitted_at": "2025-01-20T10:00:20Z",
                "parts": [{"part_kind": "user-prompt", "content": "And Berlin?"}],
            },
            {  # 3
                "turn_type": "agent",
                "agent_id": A2,
                "started_at": "2025-01-20T10:00:21Z",
                "completion_status": "interrupted",
                "interruption": {"reason": "user_cancelled", "interrupted_at": "2025-01-20T10:00:30Z"},
                "messages": [
                    {  # 0
                        "message_type": "response",
                        "timestamp": "2025-01-20T10:00:22Z",
                        "agent_id": A2,
                        "parts": [
                            {
                                "part_kind": "tool-call",
                                "tool_name": "get_weather",
                                "tool_call_id": "call_3",
                                "args": {"city": "Berlin"},
                            }
                        ],
                    },
                    {  # 1
                        "message_type": "request",
                        "timestamp": "2025-01-20T10:00:25Z",
                        "agent_id": A2,
                        "parts": [
                            {
                                "part_kind": "tool-return",
                                "tool_name": "get_weather",
                                "tool_call_id": "call_3",
                                "status": "error",
                                "content": "service down",
                            }
                        ],
                    },
                ],
            },
            {  # 4: a deferred tool (approval needed): a call without a return in a complete turn
                "turn_type": "agent",
                "agent_id": A1,
                "started_at": "2025-01-20T10:00:31Z",
                "completed_at": "2025-01-20T10:00:40Z",
                "completion_status": "complete",
                "messages": [
                    {
                        "message_type": "response",
                        "timestamp": "2025-01-20T10:00:32Z",
                        "agent_id": A1,
                        "finish_reason": "tool_call",
                        "parts": [
                            {
                                "part_kind": "tool-call",
                                "tool_name": "delete_file",
                                "tool_call_id": "call_4",
                                "args": {"path": "/tmp/x"},
                            }
                        ],
                    }
                ],
            },
        ],
    }


def base_v3() -> dict[str, Any]:
    """The same conversation as a valid v0.0.3 thread: no interrupted turn, v0.0.3 event names."""
    doc = base()
    doc["version"] = "0.0.3"
    del doc["turns"][3]
    for turn in doc["turns"]:
        turn.pop("completion_status", None)
    doc["turns"][1]["messages"][2]["event_type"] = "thread.spawn"
    return doc


Found = list[tuple[str, str, str]]


def findings(doc: dict[str, Any] | m.Thread, **kwargs: Any) -> Found:
    """(severity, rule, path) of every finding, errors first, each in document order."""
    thread = doc if isinstance(doc, m.Thread) else from_builtins(doc, m.Thread)
    report = validate(thread, **kwargs)
    out = [("error", f.rule, f.path) for f in report.errors] + [("warning", f.rule, f.path) for f in report.warnings]
    for severity, rule, _ in out:
        assert RULES[rule].severity == severity, rule
    assert report.ok == (not report.errors)
    return out


def E(rule: str, path: str) -> tuple[str, str, str]:
    return ("error", rule, path)


def W(rule: str, path: str) -> tuple[str, str, str]:
    return ("warning", rule, path)


TURN1 = "$.turns[1]"
MSG = "$.turns[1].messages"


# --------------------------------------------------------------------------- history events

T0 = "2025-01-20T10:00:00Z"


def ts(s: int) -> str:
    return f"2025-01-20T10:{s // 60:02d}:{s % 60:02d}Z"


def _agent_turn(call_ids: list[str], answers: list[str], *, at: int, end: str = "complete") -> list[Event]:
    msgs: list[Event] = [AgentTurnStarted(agent_id=A1, started_at=ts(at))]
    if call_ids:
        msgs.append(MessageRecorded(message=m.ResponseMessage(
            timestamp=ts(at + 1), agent_id=A1,
            parts=[m.ToolCallPart(tool_name="f", tool_call_id=c, args={}) for c in call_ids])))
    if answers:
        msgs.append(MessageRecorded(message=m.RequestMessage(
            timestamp=ts(at + 2), agent_id=A1,
            parts=[m.ToolReturnPart(tool_name="f", tool_call_id=c, content="r", status="success") for c in answers])))
    if end == "complete":
        msgs.append(AgentTurnCompleted(completed_at=ts(at + 3)))
    else:
        msgs.append(AgentTurnInterrupted(interruption=m.Interruption(reason="user_cancelled",
                                                                       interrupted_at=ts(at + 3))))
    return msgs


def _user_answer(call_id: str, at: int) -> UserTurnSubmitted:
    return UserTurnSubmitted(turn=m.UserTurn(submitted_at=ts(at), parts=[
        m.ToolReturnPart(tool_name="f", tool_call_id=call_id, content="approved", status="success")]))


def _new_thread_events(tid: str) -> list[Event]:
    return [ThreadStarted(thread_id=tid, created_at=T0),
            AgentRegistered(agent=m.AgentConfig(agent_id=A1, agent_name="a", created_at=T0))]
