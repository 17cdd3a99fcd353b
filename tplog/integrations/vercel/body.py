"""The UI request body: the user's new message, client-side tool results and approvals.
"""

from __future__ import annotations

from typing import Any

from tplog.errors import InvalidInputError
from tplog.protocol import model as m
from tplog.protocol.json import to_builtins

__all__ = [
    "FILE_URL_SCHEMES", "body_tool_calls", "check_user_message", "client_tool_results", "last_user_message",
    "load_user_message", "parts_of_body",
    "unanswered_calls", "user_turn_from_body",
]


# --------------------------------------------------------------------------- request body

#: What a client's file part may point at: a data URL it holds, or a public URL (Pydantic AI's UI default).
FILE_URL_SCHEMES = frozenset({"data", "http", "https"})


def last_user_message(body: dict[str, Any] | None) -> dict[str, Any] | None:
    if not body:
        return None
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return None
    last = msgs[-1]
    if isinstance(last, dict) and last.get("role") == "user":
        return last
    return None


def check_user_message(body: dict[str, Any] | None) -> Any:
    """The body's last message as Pydantic AI's ``UIMessage`` when it is the user's (else ``None``);
    :class:`~tplog.InvalidInputError` naming its first part a user message cannot hold. Pydantic AI
    loads text, file and ``data-*`` parts there; step-start, reasoning, tool and source parts come
    from an assistant's stream (a part without a ``type`` reads as a step-start)."""
    msg = last_user_message(body)
    if msg is None:
        return None
    import pydantic
    from pydantic_ai.ui.vercel_ai.request_types import DataUIPart, FileUIPart, TextUIPart, UIMessage

    assert body is not None  # it holds msg
    ui = pydantic.TypeAdapter(UIMessage).validate_python(msg)
    for i, part in enumerate(ui.parts):
        if not isinstance(part, TextUIPart | FileUIPart | DataUIPart):
            raise InvalidInputError(f"a user message holds text, file and data-* parts, not a {part.type!r} part",
                                    path=f"$.messages[{len(body['messages']) - 1}].parts[{i}]")
        scheme = part.url.partition(":")[0].lower() if isinstance(part, FileUIPart) else "data"
        if scheme not in FILE_URL_SCHEMES:
            # s3://, gs://, file://: the model provider would fetch it with the server's own identity
            raise InvalidInputError(
                f"a file part's URL must be one of {', '.join(sorted(FILE_URL_SCHEMES))}, not {scheme!r}",
                path=f"$.messages[{len(body['messages']) - 1}].parts[{i}].url")
    return ui


def load_user_message(ui: Any) -> list[Any]:
    """A client's UI message as Pydantic AI messages, through Pydantic AI's own sanitizer: no system
    prompts or instructions, file URLs only over :data:`FILE_URL_SCHEMES`, no forced downloads or
    provider-uploaded files (what its UI adapters strip from client messages before a run)."""
    from pydantic_ai.messages import sanitize_messages
    from pydantic_ai.ui.vercel_ai import VercelAIAdapter

    loaded = VercelAIAdapter.load_messages([ui])
    for msg in loaded:  # the UI message id load_messages keeps there: unused here, and the sanitizer warns of it
        if isinstance(msg.metadata, dict):
            msg.metadata.pop("__pydantic_ai__", None)
    return sanitize_messages(loaded, allowed_file_url_schemes=tuple(FILE_URL_SCHEMES - {"data"}))


def user_turn_from_body(body: dict[str, Any] | None, *, submitted_at: str) -> m.UserTurn | None:
    """The user turn in a UI request body (its last message, if it is the user's), via Pydantic AI's loader;
    :class:`~tplog.InvalidInputError` for a part a user message cannot hold (:func:`check_user_message`)."""
    ui = check_user_message(body)
    if ui is None:
        return None
    from tplog.integrations.pydantic_ai import is_user_request, user_turn_from_request

    loaded = load_user_message(ui)
    if not loaded or not is_user_request(loaded[-1]):
        return None
    return user_turn_from_request(loaded[-1], submitted_at=submitted_at)


def body_tool_calls(body: dict[str, Any] | None) -> dict[str, str]:
    """``tool_call_id -> tool_name`` of the tool parts in a UI request body's messages."""
    out: dict[str, str] = {}
    for msg in (body or {}).get("messages") or []:
        for part in (msg.get("parts") or []) if isinstance(msg, dict) else []:
            if not isinstance(part, dict) or not isinstance(part.get("toolCallId"), str):
                continue
            ptype = part.get("type", "")
            name = part.get("toolName") if ptype == "dynamic-tool" else ptype[5:] if ptype.startswith("tool-") else None
            if isinstance(name, str):
                out[part["toolCallId"]] = name
    return out


def client_tool_results(body: dict[str, Any] | None) -> dict[str, tuple[str, Any]]:
    """Tool results the client made (AI SDK v6 ``addToolOutput``/``addToolResult``):
    ``tool_call_id -> ("output", value) | ("error", text)`` from the ``output-available`` /
    ``output-error`` tool parts of the body's last message when it is the assistant's.

    Server-run tools of earlier steps show up there too: only the ids of calls still waiting for
    a result are client results (the caller knows which those are).
    """
    msgs = (body or {}).get("messages")
    last = msgs[-1] if isinstance(msgs, list) and msgs else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return {}
    out: dict[str, tuple[str, Any]] = {}
    for part in last.get("parts") or []:
        if not isinstance(part, dict) or not isinstance(part.get("toolCallId"), str):
            continue
        ptype = part.get("type", "")
        if not (isinstance(ptype, str) and (ptype.startswith("tool-") or ptype == "dynamic-tool")):
            continue
        if part.get("providerExecuted"):
            continue
        if part.get("state") == "output-available" and "output" in part:
            out[part["toolCallId"]] = ("output", part["output"])
        elif part.get("state") == "output-error" and isinstance(part.get("errorText"), str):
            out[part["toolCallId"]] = ("error", part["errorText"])
    return out


def unanswered_calls(history: Any) -> set[str]:
    """Ids of the tool calls of a Pydantic AI history's last response that no later request answers."""
    from pydantic_ai import messages as pm

    if not history:
        return set()
    calls: set[str] = set()
    for msg in history:
        if isinstance(msg, pm.ModelResponse):
            calls = {p.tool_call_id for p in msg.parts if isinstance(p, pm.ToolCallPart)}
        else:
            calls -= {p.tool_call_id for p in msg.parts if isinstance(p, pm.ToolReturnPart | pm.RetryPromptPart)}
    return calls


def parts_of_body(body: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    turn = user_turn_from_body(body, submitted_at="")
    return None if turn is None else to_builtins(turn)["parts"]
