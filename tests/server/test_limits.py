"""The server's limits (issue 37), in-process (Starlette's TestClient, a real LMDB store): chat
branches no client can take over, request shape and depth caps checked before anything is
written, runs at once and their length, the demo agent's bounds, a UI-stream failure recorded
as an error."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.server_harness import chat_body
from tplog import AgentTurnInterrupted, NotFoundError
from tplog.integrations import branches
from tplog.integrations.server import ServerLimits, create_app, demo_agents
from tplog.integrations.server.limits import Admission, check_depth, limits_from_env
from tplog.integrations.vercel import thread_id_for_chat


def _app(store: Path, **limits: Any) -> TestClient:
    return TestClient(create_app(store, demo_agents(), limits=ServerLimits(**limits)))


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with _app(tmp_path / "s") as c:
        yield c


def _version(c: TestClient, tid: str) -> int | None:
    srv = c.app.state.tplog  # type: ignore[attr-defined]
    try:
        return int(srv.store.head(tid).version)
    except NotFoundError:
        return None


def _deep(n: int) -> Any:
    v: Any = 1
    for _ in range(n):
        v = [v]
    return v


def _error(r: Any, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err: dict[str, Any] = r.json()["error"]
    assert err["code"] == code and err["status"] == status, err
    return err


# --------------------------------------------------------------------------- 2: chat branches


def test_fork_cannot_take_the_next_branch_id_of_another_chat(client: TestClient) -> None:
    victim = f"victim-{uuid.uuid4().hex[:8]}"
    root = thread_id_for_chat(victim)
    assert client.post("/api/chat", json=chat_body(victim, "my secret")).status_code == 200
    attacker = str(uuid.uuid4())
    assert client.post("/api/chat", json=chat_body(attacker, "hello")).status_code == 200
    at = _version(client, attacker)
    for reserved in (branches.branch_id(root, 1), root, victim, thread_id_for_chat("another-chat"),
                     attacker.upper(), "not-a-uuid"):
        _error(client.post(f"/threads/{attacker}/fork", json={"at": at, "thread_id": reserved}), 422,
               "reserved_thread_id")
    assert _version(client, branches.branch_id(root, 1)) is None  # nothing written
    # the victim's chat still answers with its own thread
    msgs = client.get(f"/api/chat/{victim}/messages").json()
    assert [p["text"] for p in msgs[0]["parts"] if p["type"] == "text"] == ["my secret"]
    # ids of the client's own making, and none at all, still fork
    mine = str(uuid.uuid4())
    assert client.post(f"/threads/{attacker}/fork", json={"at": at, "thread_id": mine}).json()["thread_id"] == mine
    assert client.post(f"/threads/{attacker}/fork", json={"at": at}).status_code == 201


def test_a_thread_under_a_branch_id_that_is_not_a_fork_is_a_conflict(client: TestClient) -> None:
    victim = f"victim-{uuid.uuid4().hex[:8]}"
    root = thread_id_for_chat(victim)
    assert client.post("/api/chat", json=chat_body(victim, "my secret")).status_code == 200
    # a new chat whose id is the victim's next branch id: a thread, but no fork of the victim's
    fake = branches.branch_id(root, 1)
    assert client.post("/api/chat", json=chat_body(fake, "attacker's history")).status_code == 200
    before = (_version(client, root), _version(client, fake))
    _error(client.get(f"/api/chat/{victim}/messages"), 409, "conflict")
    _error(client.post("/api/chat", json=chat_body(victim, "my next secret")), 409, "conflict")
    assert client.get(f"/api/chat/{victim}/stream").status_code == 409
    assert (_version(client, root), _version(client, fake)) == before  # nothing written to either


def test_real_branches_still_resolve(client: TestClient) -> None:
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    body = chat_body(chat, "first")
    assert client.post("/api/chat", json=body).status_code == 200
    regen = {**body, "trigger": "regenerate-message", "messageId": body["messages"][0]["id"]}
    for _ in range(3):
        assert client.post("/api/chat", json=regen).status_code == 200
    srv = client.app.state.tplog  # type: ignore[attr-defined]
    assert branches.current(srv.store, thread_id_for_chat(chat)) == (
        branches.branch_id(thread_id_for_chat(chat), 3), 3)


# --------------------------------------------------------------------------- 3: request shape


def test_too_many_parts_or_messages_is_413_before_validation(client: TestClient) -> None:
    t = str(uuid.uuid4())
    parts = [{"type": "text", "text": "x" * 20} for _ in range(40_000)]
    body = {"trigger": "submit-message", "id": t, "messages": [{"id": "u1", "role": "user", "parts": parts}]}
    t0 = time.perf_counter()
    err = _error(client.post("/api/chat", json=body), 413, "too_many_parts")
    assert time.perf_counter() - t0 < 2.0  # validating it took 5.8 s
    assert err["limit"] == 10_000
    many = {**body, "messages": [{"id": f"u{i}", "role": "user", "parts": []} for i in range(10_001)]}
    _error(client.post("/api/chat", json=many), 413, "too_many_messages")
    one = {**body, "messages": [{"id": "u1", "role": "user", "parts": parts[:1_001]}]}
    assert _error(client.post("/api/chat", json=one), 413, "too_many_parts")["limit"] == 1_000
    assert _version(client, t) is None


def test_only_the_last_message_is_validated_and_errors_name_its_index(client: TestClient) -> None:
    t = str(uuid.uuid4())
    history = [{"id": f"h{i}", "role": "user", "parts": [{"type": "text", "text": f"old {i}"}]} for i in range(50)]
    body = chat_body(t, "hello")
    body["messages"] = [*history, *body["messages"]]
    assert client.post("/api/chat", json=body).status_code == 200
    # the history is the thread's: a malformed earlier message is not even looked at
    junk = [{"id": "j", "role": "user", "parts": [{"type": "text"}]}, *history]
    assert client.post("/api/chat", json={**body, "messages": [*junk, *chat_body(t, "again")["messages"]]}
                       ).status_code == 200
    bad = {**body, "messages": [*history, {"id": "u", "role": "user", "parts": [{"type": "text"}]}]}
    err = _error(client.post("/api/chat", json=bad), 422, "invalid_body")
    assert ".messages.50.parts.0." in err["errors"][0]["loc"], err
    long = chat_body(t, "hello")  # a last message of many parts is validated in a thread: the same answer
    long["messages"][0]["parts"] = [{"type": "text", "text": f"p{i}"} for i in range(200)]
    assert client.post("/api/chat", json=long).status_code == 200
    long["messages"][0]["parts"][150] = {"type": "text"}
    err = _error(client.post("/api/chat", json=long), 422, "invalid_body")
    assert ".messages.0.parts.150." in err["errors"][0]["loc"]


def test_a_user_part_the_run_cannot_take_is_422(client: TestClient) -> None:
    """Found by tests/server/test_http_fuzz.py once only the last message was validated: such a part
    failed inside the run, before its first append: a 500."""
    t = str(uuid.uuid4())
    body = {"trigger": "submit-message", "id": t, "messages": [{"id": "u", "role": "user",
                                                                 "parts": [{"type": "step-start"}]}]}
    err = _error(client.post("/api/chat", json=body), 422, "invalid_input")
    assert err["path"] == "$.messages[0].parts[0]"
    assert _version(client, t) is None


@pytest.mark.parametrize("depth", [100, 900])
def test_deep_tool_results_are_refused_and_nothing_is_written(client: TestClient, depth: int) -> None:
    t = str(uuid.uuid4())
    client.post("/api/chat", json=chat_body(t, "where am i"))
    cid = client.get(f"/threads/{t}/pending").json()["pending"][0]["tool_call_id"]
    before = _version(client, t)
    err = _error(client.post(f"/threads/{t}/approvals", json={"results": {cid: _deep(depth)}}), 413, "too_deep")
    assert err["limit"] == 48 and err["path"].startswith(f'$["results"]["{cid}"][0]')
    assert _version(client, t) == before
    # the deepest result the limit lets through is recorded as a completed turn
    r = client.post(f"/threads/{t}/approvals", json={"results": {cid: _deep(46)}})
    assert r.status_code == 200 and client.get(f"/threads/{t}/interrupts").json()["interrupted"] is False


def test_deep_last_message_is_refused(client: TestClient) -> None:
    t = str(uuid.uuid4())
    body = chat_body(t, "hi")
    body["messages"][0]["metadata"] = _deep(60)
    _error(client.post("/api/chat", json=body), 413, "too_deep")
    assert _version(client, t) is None


def test_check_depth_counts_items() -> None:
    lim = ServerLimits(max_items=10)
    check_depth({"a": list(range(8))}, lim, "$")
    for value in ({"a": list(range(20))}, list(range(11))):
        with pytest.raises(Exception) as exc:
            check_depth(value, lim, "$")
        assert getattr(exc.value, "code", None) == "too_many_items"


# --------------------------------------------------------------------------- 5 + 9: runs


def test_a_run_past_max_run_seconds_is_recorded_as_timeout(tmp_path: Path) -> None:
    t = str(uuid.uuid4())
    with _app(tmp_path / "s", max_run_seconds=0.5) as c:
        t0 = time.perf_counter()
        r = c.post("/api/chat", json=chat_body(t, "slow 200 50"))  # 10 s unbounded
        assert r.status_code == 200 and time.perf_counter() - t0 < 5.0
        last = c.get(f"/threads/{t}/interrupts").json()["last"]
        assert last["reason"] == "timeout", last


def test_concurrent_runs_are_capped_with_503_and_nothing_written(tmp_path: Path) -> None:
    import threading

    busy, other = str(uuid.uuid4()), str(uuid.uuid4())
    with _app(tmp_path / "s", max_runs=1) as c:
        srv = c.app.state.tplog  # type: ignore[attr-defined]
        th = threading.Thread(target=lambda: c.post("/api/chat", json=chat_body(busy, "slow 40 50")))
        th.start()
        deadline = time.monotonic() + 10
        while not srv.runs and time.monotonic() < deadline:
            time.sleep(0.02)
        err = _error(c.post("/api/chat", json=chat_body(other, "hello")), 503, "too_many_runs")
        assert err["limit"] == 1
        assert _version(c, other) is None
        th.join(30)
        assert c.post("/api/chat", json=chat_body(other, "hello")).status_code == 200  # the place was given back


def test_demo_slow_is_bounded(client: TestClient) -> None:
    """``slow 100000000 0`` ran on at ~70 % CPU until shutdown: the words and the pause are capped."""
    r = client.post("/api/chat", json=chat_body(str(uuid.uuid4()), "slow 2500 0"))
    assert r.text.count('"delta":"word') == 2_000
    t0 = time.perf_counter()
    r = client.post("/api/chat", json=chat_body(str(uuid.uuid4()), "slow 2 3000"))
    assert r.text.count('"delta":"word') == 2 and time.perf_counter() - t0 < 4.5  # 1 s a word at most, not 3


def test_a_failing_ui_stream_is_recorded_as_error(tmp_path: Path) -> None:
    """A tool result the UI stream cannot encode (nested past Python's recursion limit) ends the
    run from outside the recorder: it was recorded as ``user_cancelled``, a user's stop."""
    from pydantic_ai import Agent
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        if len(messages) > 1:
            yield "done"
            return
        yield {0: DeltaToolCall(name="deep", json_args="{}", tool_call_id="call_deep")}

    agent: Any = Agent(FunctionModel(stream_function=stream, model_name="deep"), name="deep")

    @agent.tool_plain  # type: ignore[untyped-decorator]
    def deep() -> Any:
        return _deep(1200)

    t = str(uuid.uuid4())
    with TestClient(create_app(tmp_path / "s", {"deep": agent})) as c:
        r = c.post("/api/chat", json=chat_body(t, "go"))
        assert r.status_code == 200
        assert '"type":"error"' in r.text
        srv = c.app.state.tplog  # type: ignore[attr-defined]
        ends = [e.event for e in srv.store.read(t) if isinstance(e.event, AgentTurnInterrupted)]
    assert [e.interruption.reason for e in ends] == ["error"]


# --------------------------------------------------------------------------- the options


def test_limits_options_are_checked() -> None:
    for bad in ({"max_runs": 0}, {"max_streams": 1.5}, {"body_timeout": -1}, {"max_depth": True}):
        with pytest.raises(ValueError):
            ServerLimits(**bad)  # type: ignore[arg-type]
    assert limits_from_env(None) == ServerLimits()
    assert limits_from_env(ServerLimits(max_runs=3).to_env()).max_runs == 3
    for bad_env in ("[1]", "{", '{"colour": 1}', '{"max_runs": -1}'):
        with pytest.raises(RuntimeError):
            limits_from_env(bad_env)


def test_admission_counts_in_all_and_per_client() -> None:
    a = Admission("streams", total=3, per_client=2)
    r1, r2 = a.acquire("a"), a.acquire("a")
    with pytest.raises(Exception) as exc:
        a.acquire("a")
    assert getattr(exc.value, "status", None) == 429
    r3 = a.acquire("b")
    with pytest.raises(Exception) as exc:
        a.acquire("c")
    assert getattr(exc.value, "status", None) == 503
    r1()
    r1()  # a second release gives nothing back twice
    assert a.open == 2
    with a.slot("c"):
        assert a.open == 3
    r2(), r3()
    assert a.open == 0


def test_serve_flags_make_the_limits() -> None:
    from tplog.cli import _serve_limits, build_parser
    from tplog.errors import InvalidInputError

    def limits(*flags: str) -> Any:
        return _serve_limits(build_parser().parse_args(["serve", "store", *flags]))

    assert limits() == ServerLimits()
    got = limits("--max-run-seconds", "5", "--max-concurrent-runs", "3", "--max-streams", "9",
                 "--max-streams-per-client", "2", "--request-timeout", "7")
    assert got == ServerLimits(max_run_seconds=5, max_runs=3, max_streams=9, max_streams_per_client=2,
                               header_timeout=7, body_timeout=7)
    with pytest.raises(InvalidInputError):
        limits("--max-concurrent-runs", "0")


def test_shape_checks_leave_other_bodies_to_validation() -> None:
    from tplog.integrations.server.limits import check_chat_shape

    check_chat_shape({"messages": "nope"}, ServerLimits())  # the full validation names the wrong type
    check_chat_shape({"messages": [1, {"parts": None}, {"parts": [{}]}]}, ServerLimits(max_parts=1))


# --------------------------------------------------------------------------- 4: wake-ups


def test_live_writes_notify_and_shared_reads_follow_the_turn() -> None:
    import asyncio

    from tplog.backends.live import MemoryLive, NotifyingLive
    from tplog.integrations.server.wakeups import SharedLiveReads, Wakeups

    written: list[str] = []
    live = NotifyingLive(MemoryLive(), written.append)

    async def main() -> None:
        reads = SharedLiveReads(live)
        wake = Wakeups()
        with reads.reading("t"), reads.reading("t"), wake.watching("T"):
            ev = wake.event("t")
            live.write("t", 5, [b"a", b"b"])
            wake.wake(written)
            assert ev.is_set() and not wake.event("t").is_set()  # a new event for the next wake
            both = await asyncio.gather(reads.read("t"), reads.read("t", after=1))  # one read for both
            assert [b for _, b in both] == [[b"a", b"b"], [b"b"]]
            live.write("t", 5, [b"c"])
            assert (await reads.read("t", after=2))[1] == [b"c"]
            live.write("t", 9, [b"x"])  # a newer turn replaced the entries: read from its start
            hdr, got = await reads.read("t")
            assert hdr.turn_seq == 9 and got == [b"x"]
            assert live.request_stop("t", 9) and live.read("t")[0].stop  # type: ignore[union-attr]
            live.expire("t", 9)
            assert live.read("t") == (None, [])
            assert live.sweep(done_before=0, stale_before=0) == 0
            ev = wake.event("t")
            wake.wake(None)
            assert ev.is_set()
        assert not reads._cache and not wake._events  # nothing kept once nobody reads

    asyncio.run(main())
    assert written == ["t", "t", "t"]


def test_the_watcher_names_the_threads_an_append_touched(tmp_path: Path) -> None:
    import asyncio

    from tplog.integrations.server.state import _FANOUT_PAGE, _Watcher
    from tplog.integrations.server.wakeups import Wakeups

    with TestClient(create_app(tmp_path / "s", demo_agents())) as c:
        a, b = str(uuid.uuid4()), str(uuid.uuid4())
        for t in (a, b):
            assert c.post("/api/chat", json=chat_body(t, "hi")).status_code == 200
        store = c.app.state.tplog.store  # type: ignore[attr-defined]
        w = _Watcher(store, asyncio.new_event_loop(), 0.05, Wakeups())
        pos = store.last_position
        assert w._touched(0, pos) == {a, b}
        assert w._touched(pos - 1, pos) == {b}
        assert w._touched(0, _FANOUT_PAGE + 1) is None  # too many to read: everyone wakes
        w.loop.close()
    assert w._touched(0, 1) is None  # the store closed: everyone wakes
