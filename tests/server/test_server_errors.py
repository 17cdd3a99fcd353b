"""How errors surface: each tplog error's HTTP status, bad configuration of the app and its factory,
bad requests to a real server, and the append timings a worker dumps at shutdown."""

from __future__ import annotations

import errno
import json
import uuid
from pathlib import Path

import pytest
from conftest import started, user

from server.server_harness import ServerProcess, chat_body
from tplog import (
    ConflictError,
    InvalidEventError,
    InvalidInputError,
    NotFoundError,
    Store,
    WrongExpectedVersionError,
)
from tplog.errors import (
    CorruptionError,
    IdempotencyError,
    ReadOnlyError,
    StorageFullError,
    StoreClosedError,
    ThreadDeletedError,
)
from tplog.integrations import server as srvmod
from tplog.integrations.server import ENV_METRICS, ENV_ON_DISCONNECT, ENV_STORE, HTTPError, create_app, http_error
from tplog.integrations.server import factory as srvfactory


@pytest.mark.parametrize(("exc", "status", "code"), [
    (HTTPError(418, "teapot", "short and stout"), 418, "teapot"),
    (WrongExpectedVersionError("t: expected 1, at 2", expected=1, actual=2), 409, "version_conflict"),
    (IdempotencyError("event id reused"), 409, "conflict"),
    (InvalidEventError("a turn is open"), 409, "invalid_state"),
    (InvalidInputError("bad"), 422, "invalid_input"),
    (NotFoundError("no thread t"), 404, "not_found"),
    (ThreadDeletedError("t was deleted"), 410, "thread_deleted"),
    (ReadOnlyError("read-only disk"), 503, "read_only"),
    (StorageFullError(errno.ENOSPC, "disk full"), 507, "storage_full"),
    (StoreClosedError("closed"), 503, "unavailable"),
    (CorruptionError("bad CRC", thread_id="t", seq=2), 500, "CorruptionError"),
    (RuntimeError("boom"), 500, "internal_error"),
])
def test_each_error_has_its_http_status(exc: BaseException, status: int, code: str) -> None:
    err = http_error(exc)
    assert (err.status, err.code) == (status, code)
    if isinstance(exc, WrongExpectedVersionError):
        assert err.extra == {"expected": 1, "actual": 2}
    if code == "internal_error":  # not tplog's error: its text stays in the log (issue 37)
        assert "boom" not in err.message and "RuntimeError" not in err.message
    else:
        assert str(exc) in err.message
    if code == "conflict":  # any ConflictError that is not a version conflict
        assert isinstance(exc, ConflictError)


def test_bad_configuration_is_refused_before_serving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agents = srvmod.demo_agents()
    with pytest.raises(ValueError, match="on_disconnect must be 'finish' or 'interrupt', not 'later'"):
        create_app(tmp_path / "s", agents, on_disconnect="later")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs at least one agent"):
        create_app(tmp_path / "s", {})
    with pytest.raises(srvmod.ServeError, match="agents 'race_agents': expected MODULE:ATTRIBUTE"):
        srvfactory._load_agents("race_agents")
    with pytest.raises(srvmod.ServeError, match="agents 'os:sep': not a non-empty dict of agents"):
        srvfactory._load_agents("os:sep")
    assert list(srvfactory._load_agents("server.race_agents:agents")) == ["racer"]  # a callable returning them
    assert list(srvfactory._load_agents(None)) == ["demo"]
    monkeypatch.delenv(ENV_STORE, raising=False)
    with pytest.raises(RuntimeError, match=f"set {ENV_STORE}"):
        srvmod.app_from_env()
    monkeypatch.setenv(ENV_STORE, str(tmp_path / "s"))
    monkeypatch.setenv(ENV_ON_DISCONNECT, "sometimes")
    with pytest.raises(RuntimeError, match=f"{ENV_ON_DISCONNECT} must be finish or interrupt, not 'sometimes'"):
        srvmod.app_from_env()
    assert not (tmp_path / "s").exists()  # nothing was opened or created


def test_bad_requests_to_a_real_server(server: ServerProcess) -> None:
    t = str(uuid.uuid4())
    with server.client() as c:
        r = c.post("/api/chat", json=chat_body("x" * 513, "hi"))
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_body", r.text
        assert "≤ 512 bytes" in r.json()["error"]["message"]
        r = c.post(f"/threads/{t}/approvals", json={"approvals": ["c1"]})
        assert r.status_code == 422 and "must be objects keyed by tool_call_id" in r.json()["error"]["message"]
        with Store(server.store) as s:
            s.append(t, [started(t), user("hello")])  # no agent: the user turn alone is valid
            s.delete_thread(t)
        r = c.post(f"/threads/{t}/approvals", json={"approvals": {"c1": True}})
        assert (r.status_code, r.json()["error"]["code"]) == (410, "thread_deleted"), r.text
        r = c.get(f"/threads/{t}/turns")
        assert (r.status_code, r.json()["error"]["code"]) == (410, "thread_deleted"), r.text
        r = c.post("/api/chat", json=chat_body(t, "hi again"))
        assert (r.status_code, r.json()["error"]["code"]) == (410, "thread_deleted"), r.text
    with Store(server.store, readonly=True) as s:
        assert s.head(t).status == "deleted" and s.head(t).version == 3  # the refused requests wrote nothing


def test_a_worker_dumps_its_append_timings_at_shutdown(tmp_path: Path) -> None:
    prefix = tmp_path / "timings"
    srv = ServerProcess(tmp_path / "store", env={ENV_METRICS: str(prefix)}).start()
    t = str(uuid.uuid4())
    try:
        with srv.client() as c:
            r = c.post("/api/chat", json=chat_body(t, "hello"))
            assert r.status_code == 200, r.text
    finally:
        srv.stop()
    [dump] = list(tmp_path.glob("timings.*.json"))
    data = json.loads(dump.read_text())
    assert data["pid"] in srv.pids
    with Store(srv.store, readonly=True) as s:
        version = s.head(t).version
    assert sum(n for tid, n, _ in data["appends"] if tid == t) == version  # every event, once
    [(tid, append_s, appends, request_s)] = data["requests"]
    assert tid == t and appends == len([a for a in data["appends"] if a[0] == t]) and 0 < append_s <= request_s


def _serve(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``tplog serve ARGV`` in this process, refused: exit 2 and the one error line it prints."""
    from tplog.cli import main

    assert main(["serve", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err.strip()


def test_serve_names_what_is_wrong_with_an_agents_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Every way an ``--agents`` spec can fail to load is one error line naming the spec, before the
    store is created or a port bound."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "tp_needs_dep.py").write_text("import tp_no_such_dependency\n")
    (tmp_path / "mods" / "tp_raises.py").write_text("raise ValueError('bad config')\n")
    (tmp_path / "mods" / "tp_factory.py").write_text("def agents():\n    raise KeyError('OPENAI_API_KEY')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    store = str(tmp_path / "store")
    cases = {
        "tp_not_there:agents": "agents 'tp_not_there:agents': no module named 'tp_not_there'",
        "tp_needs_dep:agents": ("agents 'tp_needs_dep:agents': no module named 'tp_no_such_dependency' "
                                "(while importing tp_needs_dep)"),
        "tp_raises:agents": "agents 'tp_raises:agents': importing tp_raises raised ValueError: bad config",
        "tp_factory:missing": "agents 'tp_factory:missing': module tp_factory has no attribute 'missing'",
        "tp_factory:agents": "agents 'tp_factory:agents': calling agents() raised KeyError: 'OPENAI_API_KEY'",
    }
    for spec, says in cases.items():
        assert _serve(capsys, store, "--port", "1", "--agents", spec) == f"error: {says}"
    assert not (tmp_path / "store").exists()


def test_serve_refuses_an_address_it_cannot_listen_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err = _serve(capsys, str(tmp_path / "store"), "--port", str(port))
    assert err == f"error: cannot listen on 127.0.0.1:{port}: the port is already in use"
    host = "x" * 64 + ".example"  # a DNS label longer than 63: refused before any lookup
    assert _serve(capsys, str(tmp_path / "store"), "--host", host).startswith(f"error: cannot listen on {host}:8000: ")
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(("var", "value", "says"), [
    ("TPLOG_SERVER_TP_CHUNKS", "all", "must be transient or parts, not 'all'"),
    ("TPLOG_SERVER_AFTER_STOP", "later", "must be interrupt, wait or reject, not 'later'"),
    ("TPLOG_SERVER_RESUMABLE", "yes", "must be 1 or 0, not 'yes'"),
])
def test_a_worker_refuses_a_bad_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, var: str, value: str,
                                            says: str) -> None:
    monkeypatch.setenv(ENV_STORE, str(tmp_path / "s"))
    monkeypatch.setenv(var, value)
    with pytest.raises(RuntimeError, match=f"^{var} {says}$"):
        srvmod.app_from_env()
    assert not (tmp_path / "s").exists()


def test_a_worker_refuses_a_bad_shutdown_grace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tplog.integrations.server.config import ENV_SHUTDOWN_GRACE

    monkeypatch.setenv(ENV_STORE, str(tmp_path / "s"))
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv(ENV_SHUTDOWN_GRACE, bad)
        with pytest.raises(srvmod.ServeError, match=f"shutdown grace must be a number of seconds ≥ 0, not '{bad}'"):
            srvmod.app_from_env({"demo": object()})
    assert not (tmp_path / "s").exists()
    with pytest.raises(srvmod.ServeError, match=r"not '-2\.0'"):
        srvmod.serve(tmp_path / "s", shutdown_grace=-2.0)
