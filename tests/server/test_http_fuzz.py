"""HTTP request bodies fuzzed (issue 25): the server's POST endpoints, in process.

Hypothesis generates bodies for ``POST /api/chat`` and ``POST /threads/{id}/approvals``:
arbitrary JSON, raw bytes (malformed, deep, huge numbers), and valid bodies with one
part replaced by anything. Each request goes through the whole ASGI app (Starlette's
test client, the store a real LMDB directory). A 4xx must carry a JSON error; a 500,
or an exception out of the app (also one in the middle of a 200's stream), is a failure.
The default run sends a few hundred bodies; ``--soak`` tens of thousands
(``TPLOG_HTTP_FUZZ_EXAMPLES`` per test).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel
from starlette.testclient import TestClient
from strategies import json_values

from tplog.integrations.server import create_app

SOAK = "--soak" in sys.argv
EXAMPLES = int(os.environ.get("TPLOG_HTTP_FUZZ_EXAMPLES", "20000" if SOAK else "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])
TALLY: dict[str, int] = {}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    agents = {"echo": Agent(TestModel(custom_output_text="ok")), "other": Agent(TestModel(custom_output_text="no"))}
    app = create_app(str(tmp_path_factory.mktemp("fuzz") / "store"), agents, heartbeat=3600)
    with TestClient(app) as c:  # raise_server_exceptions: an exception out of the app fails the test
        yield c
    print(f"\nHTTP fuzz: {json.dumps(TALLY, sort_keys=True)}")


def _check(r: Any, what: str) -> None:
    TALLY[f"{what} {r.status_code}"] = TALLY.get(f"{what} {r.status_code}", 0) + 1
    assert r.status_code < 500, (r.status_code, r.text[:2000])
    if r.status_code >= 400:
        body = r.json()
        assert isinstance(body, dict) and isinstance(body.get("error"), dict | str), r.text[:500]


# --------------------------------------------------------------------------- bodies

_part_types = st.sampled_from(["text", "reasoning", "file", "step-start", "dynamic-tool", "tool-get_weather",
                               "data-tp-user_turn", "source-url", "tool-approval-response", "nonsense"])
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=40)}),
    st.fixed_dictionaries({"type": _part_types}, optional={
        "text": json_values, "toolCallId": json_values, "state": json_values, "input": json_values,
        "output": json_values, "approval": json_values, "data": json_values, "url": json_values,
        "mediaType": json_values, "id": json_values, "approved": json_values}),
    json_values,
)
messages = st.one_of(
    st.fixed_dictionaries({"id": st.text(max_size=8), "role": st.sampled_from(["user", "assistant", "system", "x"]),
                           "parts": st.lists(parts, max_size=4)},
                          optional={"metadata": json_values}),
    json_values,
)
chat_bodies = st.one_of(
    st.fixed_dictionaries(
        {"id": st.one_of(st.text(min_size=1, max_size=12), json_values),
         "messages": st.one_of(st.lists(messages, max_size=3), json_values)},
        optional={"trigger": st.one_of(st.sampled_from(["submit-message", "regenerate-message"]), json_values),
                  "messageId": json_values, "agent": st.one_of(st.sampled_from(["echo", "other", "nope"]), json_values),
                  "body": json_values, "metadata": json_values, "extra": json_values}),
    st.dictionaries(st.text(max_size=10), json_values, max_size=5),
    json_values,
)
approval_bodies = st.one_of(
    st.fixed_dictionaries({}, optional={
        "approvals": st.one_of(st.dictionaries(st.text(max_size=8), st.one_of(
            st.booleans(), st.fixed_dictionaries({"approved": json_values}, optional={"reason": json_values}),
            json_values), max_size=3), json_values),
        "results": st.one_of(st.dictionaries(st.text(max_size=8), json_values, max_size=3), json_values),
        "agent": st.one_of(st.sampled_from(["echo", "other"]), json_values),
        "extra": json_values}),
    json_values,
)
raw_bodies = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"[" * 100_000, b'{"a":' * 50_000, b"1" * 5000, b'{"id": 1e999999}', b"NaN", b'{"id": NaN}',
                     b"\xff\xfe{}", b'{"id": "\\ud800"}', b"{}" + b" " * 10, b" \n\t "]),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
)
thread_ids = st.one_of(st.uuids().map(str), st.text(min_size=1, max_size=20), st.just("t-known"))


def _send(client: TestClient, url: str, body: Any, raw: bool) -> Any:
    if raw:
        return client.post(url, content=body, headers={"content-type": "application/json"})
    return client.post(url, content=json.dumps(body, allow_nan=True).encode(), headers={"content-type":
                                                                                          "application/json"})


@FUZZ
@given(body=st.one_of(chat_bodies.map(lambda b: (b, False)), raw_bodies.map(lambda b: (b, True))))
def test_chat_bodies(client: TestClient, body: tuple[Any, bool]) -> None:
    _check(_send(client, "/api/chat", *body), "chat")


@FUZZ
@given(thread=thread_ids, body=st.one_of(approval_bodies.map(lambda b: (b, False)),
                                        raw_bodies.map(lambda b: (b, True))))
def test_approval_bodies(client: TestClient, thread: str, body: tuple[Any, bool]) -> None:
    _check(_send(client, f"/threads/{quote(thread, safe='')}/approvals", *body), "approvals")


def test_known_thread_then_fuzzed_approvals(client: TestClient) -> None:
    """A thread that exists (so approvals get past the lookup), for the fuzzed bodies above."""
    t = f"fz-{uuid.uuid4()}"
    r = client.post("/api/chat", json={"trigger": "submit-message", "id": t,
                                       "messages": [{"id": "m", "role": "user", "parts": [{"type": "text",
                                                                                          "text": "hi"}]}]})
    assert r.status_code == 200, r.text
    for body in ({"approvals": {"x": True}}, {"results": {"x": 1}}, {"approvals": {"x": {"approved": False}}},
                 {"approvals": {}, "results": {}}, {"agent": "nope", "approvals": {"x": True}}):
        _check(client.post(f"/threads/{t}/approvals", json=body), "approvals-known")


def test_deeply_nested_body_is_a_4xx(client: TestClient) -> None:
    """Found by the fuzzer: json.loads raises RecursionError (not ValueError) on deep nesting."""
    for deep in (b"[" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000):
        _check(client.post("/api/chat", content=deep, headers={"content-type": "application/json"}), "deep")
        _check(client.post(f"/threads/{uuid.uuid4()}/approvals", content=deep,
                           headers={"content-type": "application/json"}), "deep")

