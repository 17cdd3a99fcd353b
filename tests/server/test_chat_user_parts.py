"""A user message holding a part only an assistant message has (issue 37): a 422 naming the part.

Pydantic AI loads a user message's text, file and data-* parts only; step-start, reasoning, tool
and source parts come from the assistant's stream, and the AI SDK never puts them in a user
message. The fuzzer found a step-start there giving a 500 (Pydantic AI's ValueError), then a
part with no type at all (which Pydantic AI reads as a step-start).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from server.inproc import in_process
from tplog import InvalidInputError, Store

NOT_A_USERS = [
    {"type": "step-start"},
    {},  # no type: Pydantic AI reads it as a step-start (what the fuzzer sent next)
    {"type": "reasoning", "text": "thinking"},
    {"type": "source-url", "sourceId": "s1", "url": "https://example.com"},
    {"type": "source-document", "sourceId": "s1", "mediaType": "text/plain", "title": "t"},
    {"type": "tool-echo", "toolCallId": "c1", "state": "input-available", "input": {}},
    {"type": "tool-echo", "toolCallId": "c1", "state": "output-available", "input": {}, "output": 1},
    {"type": "dynamic-tool", "toolName": "echo", "toolCallId": "c1", "state": "output-available", "input": {},
     "output": 1},
]


@pytest.mark.parametrize("part", NOT_A_USERS, ids=lambda p: f"{p.get('type', 'untyped')}-{p.get('state', '')}")
@pytest.mark.parametrize("where", [0, 1])
def test_a_part_a_user_message_cannot_hold_is_a_422_naming_it(tmp_path: Path, part: dict[str, Any],
                                                                 where: int) -> None:
    chat = str(uuid.uuid4())
    parts = [part, {"type": "text", "text": "hi"}] if where == 0 else [{"type": "text", "text": "hi"}, part]
    body = {"id": chat, "trigger": "submit-message",
            "messages": [{"id": "u0", "role": "user", "parts": [{"type": "text", "text": "earlier"}]},
                         {"id": "u1", "role": "user", "parts": parts}]}
    with Store(str(tmp_path / "s")) as store, in_process(store) as client:
        r = client.post("/api/chat", json=body)
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["code"] == "invalid_input"
        assert err["path"] == f"$.messages[1].parts[{where}]"
        assert part.get("type", "step-start") in err["message"]
        assert store.threads().threads == []  # nothing written


def test_data_parts_in_a_user_message_are_ignored(tmp_path: Path) -> None:
    chat = str(uuid.uuid4())
    body = {"id": chat, "trigger": "submit-message",
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "data-note", "data": {"a": 1}},
                                                                 {"type": "text", "text": "hi"}]}]}
    with Store(str(tmp_path / "s")) as store, in_process(store) as client:
        r = client.post("/api/chat", json=body)
        assert r.status_code == 200, r.text
        assert "text-delta" in r.text
        (head,) = store.threads().threads
        assert head.user_turns == 1


@pytest.mark.parametrize("part", NOT_A_USERS[:3], ids=["step-start", "untyped", "reasoning"])
def test_the_library_entry_points_name_the_part_too(part: dict[str, Any]) -> None:
    from tplog.integrations.vercel import ui_request, user_turn_from_body

    body = {"id": "c", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "x"}, part]}]}
    for call in (ui_request, lambda b: user_turn_from_body(b, submitted_at="2025-01-20T10:00:00Z")):
        with pytest.raises(InvalidInputError) as err:
            call(body)
        assert err.value.path == "$.messages[0].parts[1]"


# A file part's URL is fetched by the model provider with the server's own identity (s3://, gs://) or
# read from the server's disk (file://): only what Pydantic AI's UI adapters let through is accepted.
BAD_FILE_URLS = ["s3://bucket/secret.pdf", "gs://bucket/k", "file:///etc/passwd", "S3://bucket/k", "ftp://h/f"]


@pytest.mark.parametrize("url", BAD_FILE_URLS)
def test_a_file_part_with_a_private_url_scheme_is_a_422_and_nothing_runs(tmp_path: Path, url: str) -> None:
    chat = str(uuid.uuid4())
    part = {"type": "file", "mediaType": "application/pdf", "url": url}
    body = {"id": chat, "trigger": "submit-message",
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "read it"}, part]}]}
    with Store(str(tmp_path / "s")) as store, in_process(store) as client:
        r = client.post("/api/chat", json=body)
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["code"] == "invalid_input"
        assert err["path"] == "$.messages[0].parts[1].url"
        assert url.split(":")[0].lower() in err["message"]
        assert store.threads().threads == []  # nothing written, no run


@pytest.mark.parametrize("url", ["https://example.com/a.pdf", "data:application/pdf;base64,JVBERi0="])
def test_a_public_or_inline_file_part_is_recorded(tmp_path: Path, url: str) -> None:
    chat = str(uuid.uuid4())
    part = {"type": "file", "mediaType": "application/pdf", "url": url}
    body = {"id": chat, "trigger": "submit-message",
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "read it"}, part]}]}
    with Store(str(tmp_path / "s")) as store, in_process(store) as client:
        r = client.post("/api/chat", json=body)
        assert r.status_code == 200, r.text
        (head,) = store.threads().threads
        turn = store.load(head.thread_id).thread.turns[0]  # type: ignore[union-attr]
        assert "read it" in str(turn) and "application/pdf" in str(turn)


@pytest.mark.parametrize("url", BAD_FILE_URLS[:3])
def test_the_library_entry_points_refuse_a_private_file_url(url: str) -> None:
    from tplog.integrations.vercel import load_user_message, user_turn_from_body
    from tplog.integrations.vercel.body import check_user_message

    part = {"type": "file", "mediaType": "application/pdf", "url": url}
    body = {"id": "c", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "x"}, part]}]}
    for call in (check_user_message, lambda b: user_turn_from_body(b, submitted_at="2025-01-20T10:00:00Z")):
        with pytest.raises(InvalidInputError) as err:
            call(body)
        assert err.value.path == "$.messages[0].parts[1].url"
    # a caller that loads the message itself still gets Pydantic AI's sanitizer: the file is dropped
    import pydantic
    from pydantic_ai.messages import FileUrl
    from pydantic_ai.ui.vercel_ai.request_types import UIMessage

    with pytest.warns(UserWarning):
        loaded = load_user_message(pydantic.TypeAdapter(UIMessage).validate_python(body["messages"][0]))
    contents = [c for msg in loaded for p in msg.parts for c in (p.content if isinstance(p.content, list) else [])]
    assert not any(isinstance(c, FileUrl) for c in contents)
