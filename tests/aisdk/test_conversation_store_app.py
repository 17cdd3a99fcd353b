"""The real AI SDK client (npm ``ai`` 6 and 7) against Pydantic AI's own UI adapter with tplog as its
conversation store: the README's Starlette app (``cs_app.py``: ``VercelAIAdapter.dispatch_request``
with ``conversation_store=TplogConversationStore(...)`` and the user as ``conversation_scope``),
served by uvicorn in its own process. Each conversation is a tplog thread that validates.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server.server_harness import free_port

from aisdk.conftest import MAJORS, SdkClient
from aisdk.test_aisdk import check_clean, texts, tool_parts
from tplog import Store, thread_id_for
from tplog.integrations.pydantic_ai import TplogConversationStore
from tplog.protocol.validate import validate

HERE = Path(__file__).resolve().parent
ALICE = {"x-user": "alice"}


class App:
    def __init__(self, store: Path, url: str) -> None:
        self.store, self.url = store, url
        self.api = f"{url}/api/chat"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    store = tmp_path_factory.mktemp("cs-app") / "conversations"
    port = free_port()
    env = {**os.environ, "TPLOG_CS_STORE": str(store),
           "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parents[1])])}
    log = open(store.parent / "uvicorn.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "cs_app:app", "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (store.parent / "uvicorn.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/api/chat/none/messages", headers=ALICE, timeout=2).status_code == 404:
                    break
            assert time.monotonic() < deadline, "the app did not start"
            time.sleep(0.2)
        yield App(store, url)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def stored(app: App, chat_id: str, scope: str = "alice") -> Any:
    """The conversation as another process loads it, after checking that its thread validates."""
    with Store(app.store, readonly=True) as s:
        report = validate(s.thread(thread_id_for(chat_id)))
        assert report.ok, report.errors

    async def load() -> Any:
        async with TplogConversationStore(Store(app.store, readonly=True)) as cs:
            return await cs.load(chat_id, scope=scope)

    return asyncio.run(load())


@pytest.mark.parametrize("major", MAJORS)
def test_text_is_saved_as_a_thread(sdk: SdkClient, app: App, major: int) -> None:
    out = sdk.run(major, "text", api=app.api, headers=ALICE)
    check_clean(out)
    msgs = out["messages"]
    assert texts(msgs[1]) == "You said: hello there" and texts(msgs[3]) == "You said: and again"
    conv = stored(app, out["chatId"])
    assert [m.kind for m in conv.messages] == ["request", "response"] * 2
    with Store(app.store, readonly=True) as s:
        turns = s.thread(thread_id_for(out["chatId"])).turns
    assert [type(t).__name__ for t in turns] == ["UserTurn", "AgentTurn"] * 2


@pytest.mark.parametrize("major", MAJORS)
def test_a_tool_call_and_its_result(sdk: SdkClient, app: App, major: int) -> None:
    out = sdk.run(major, "tools", api=app.api, headers=ALICE)
    check_clean(out)
    (call,) = tool_parts(out["messages"][-1])
    assert (call["type"], call["state"], call["output"]) == ("tool-get_weather", "output-available", "sunny in Paris")
    assert "get_weather: sunny in Paris." in texts(out["messages"][-1])
    conv = stored(app, out["chatId"])
    assert any(p.part_kind == "tool-return" for m in conv.messages for p in m.parts)


@pytest.mark.parametrize("major", MAJORS)
def test_an_approved_call_runs_after_the_approval(sdk: SdkClient, app: App, major: int) -> None:
    out = sdk.run(major, "approvals", api=app.api, headers=ALICE)
    check_clean(out)
    assert out["notes"]["approvalRequested"]
    (call,) = tool_parts(out["messages"][-1])
    assert (call["type"], call["state"], call["output"]) == ("tool-delete_file", "output-available", "deleted /tmp/x")
    conv = stored(app, out["chatId"])
    assert conv.deferred_tool_requests is None  # answered: nothing is waiting any more
    returns = [p for m in conv.messages for p in m.parts if p.part_kind == "tool-return"]
    assert [(r.tool_name, r.content) for r in returns] == [("delete_file", "deleted /tmp/x")]


@pytest.mark.parametrize("major", MAJORS)
def test_reload_gives_the_stored_chat_back(sdk: SdkClient, app: App, major: int) -> None:
    first = sdk.run(major, "text", api=app.api, headers=ALICE)
    check_clean(first)
    out = sdk.run(major, "reload", api=app.api, headers=ALICE, chatId=first["chatId"])
    check_clean(out)
    assert [texts(m) for m in out["notes"]["saved"]] == [texts(m) for m in first["messages"]]
    assert texts(out["messages"][-1]) == "You said: after reload"
    assert len(stored(app, first["chatId"]).messages) == 6


@pytest.mark.parametrize("major", MAJORS)
def test_another_users_chat_is_not_found_and_stays_as_it_was(sdk: SdkClient, app: App, major: int) -> None:
    first = sdk.run(major, "text", api=app.api, headers=ALICE)
    before = stored(app, first["chatId"])
    bob = {"x-user": "bob"}
    r = httpx.get(f"{app.api}/{first['chatId']}/messages", headers=bob, timeout=30)
    assert r.status_code == 404
    out = sdk.run(major, "text", api=app.api, headers=bob, chatId=first["chatId"])
    assert {q["status"] for q in out["requests"]} == {404}  # each of the scenario's two messages
    assert out["error"] is not None
    after = stored(app, first["chatId"])
    assert after.messages == before.messages and after.revision == before.revision
    assert stored(app, first["chatId"], scope="bob") is None
