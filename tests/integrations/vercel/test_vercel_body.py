"""tplog/integrations/vercel/body.py on the request bodies a client can send (issue #38's mutants):
the user message's checks and loading, the tool calls a body names, the client's tool results."""

from __future__ import annotations

import warnings

import pytest

from tplog import InvalidInputError
from tplog.integrations.vercel.body import (
    body_tool_calls,
    check_user_message,
    client_tool_results,
    load_user_message,
    user_turn_from_body,
)

T0 = "2026-01-01T00:00:00Z"


def _user(*parts: dict[str, object]) -> dict[str, object]:
    return {"messages": [{"id": "u1", "role": "user", "parts": list(parts)}]}


def test_a_file_url_with_a_port_is_judged_by_its_scheme_only() -> None:
    body = _user({"type": "file", "mediaType": "image/png", "url": "https://example.com:8080/a.png"})
    turn = user_turn_from_body(body, submitted_at=T0)
    assert turn is not None and turn.parts[0].content[0].url == "https://example.com:8080/a.png"


def test_a_refused_file_scheme_names_the_allowed_ones() -> None:
    body = _user({"type": "text", "text": "hi"}, {"type": "file", "mediaType": "image/png", "url": "s3://b/k.png"})
    with pytest.raises(InvalidInputError) as err:
        check_user_message(body)
    assert "data, http, https" in str(err.value) and "'s3'" in str(err.value)
    assert err.value.path == "$.messages[0].parts[1].url"


def test_loading_a_user_message_keeps_no_framework_metadata_and_warns_of_none() -> None:
    ui = check_user_message(_user({"type": "text", "text": "hi"}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the sanitizer warns of a __pydantic_ai__ key left in
        loaded = load_user_message(ui)
    assert [msg.metadata for msg in loaded] == [{}]


def test_a_user_message_of_data_parts_only_is_no_user_turn() -> None:
    # Pydantic AI loads no request from it: nothing to record as the user's turn
    assert user_turn_from_body(_user({"type": "data-note", "data": {"a": 1}}), submitted_at=T0) is None


def test_body_tool_calls_names_tool_and_dynamic_tool_parts_only() -> None:
    body = {"messages": [
        "not a message",
        {"role": "user", "parts": ["not a part", {"type": "text", "text": "x"}]},
        {"role": "assistant", "parts": [
            {"toolCallId": "untyped"},
            {"type": "data-x", "toolCallId": "data"},
            {"type": "tool-get_weather", "toolCallId": "c1", "state": "input-available", "input": {}},
            {"type": "dynamic-tool", "toolName": "lookup", "toolCallId": "c2", "state": "input-available"},
            {"type": "dynamic-tool", "toolCallId": "nameless"},
        ]},
    ]}
    assert body_tool_calls(body) == {"c1": "get_weather", "c2": "lookup"}
    assert body_tool_calls(None) == {} and body_tool_calls({}) == {}


def _assistant(*parts: object) -> dict[str, object]:
    return {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]},
                         {"id": "a1", "role": "assistant", "parts": list(parts)}]}


def test_client_tool_results_are_the_outputs_and_errors_of_the_last_assistant_message() -> None:
    body = _assistant(
        "not a part",
        {"type": "text", "text": "x", "toolCallId": "text", "state": "output-available", "output": 1},
        {"type": "tool-search", "toolCallId": "server", "state": "output-available", "output": 2,
         "providerExecuted": True},
        {"type": "tool-get_weather", "toolCallId": "c1", "state": "output-available", "output": {"t": 20}},
        {"type": "dynamic-tool", "toolName": "lookup", "toolCallId": "c2", "state": "output-error",
         "errorText": "no such city"},
        {"type": "tool-ask", "toolCallId": "waiting", "state": "input-available", "output": None,
         "errorText": "stale"},
        {"type": "tool-ask", "toolCallId": "no_text", "state": "output-error"},
    )
    assert client_tool_results(body) == {"c1": ("output", {"t": 20}), "c2": ("error", "no such city")}


@pytest.mark.parametrize("body", [
    None, {}, {"messages": []}, {"messages": "x"}, {"messages": ["not a message"]},
    {"messages": [{"role": "user", "parts": [
        {"type": "tool-x", "toolCallId": "c1", "state": "output-available", "output": 1}]}]},
])
def test_no_client_tool_results_without_a_last_assistant_message(body: object) -> None:
    assert client_tool_results(body) == {}  # type: ignore[arg-type]
