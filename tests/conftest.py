"""Shared fixtures and event builders for the store tests.

Every store a test opens goes through the ``open_store`` factory (or the
``store`` fixture built on it), so it is closed at teardown even when the
test fails. Randomised tests take the ``rng`` fixture: its seed is printed
(shown by pytest on failure) and can be pinned with ``TPLOG_TEST_SEED``.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import settings
from postgres import pg_server

from tplog import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnStarted,
    LinkAdded,
    MessageRecorded,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.protocol import AgentConfig, ResponseMessage, SystemMessage, TextPart, ThreadLink, UserPromptPart, UserTurn
from tplog.store import AppendResult, Store

# No per-example deadline: on a loaded 2-core runner, traced by coverage, single examples took over the
# default 200 ms and failed tests that are about results, not speed.
settings.register_profile("tplog", deadline=None)
settings.load_profile("tplog")

T = "2025-01-20T10:00:00Z"


# --------------------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    with contextlib.suppress(ValueError):  # already added by another conftest
        parser.addoption("--soak", action="store_true", default=False, help="run long soak/fuzz tests")


# --------------------------------------------------------------------------- markers (make test-fast)

TESTS = Path(__file__).resolve().parent

#: Tests outside tests/postgres that reach PostgreSQL without a ``postgres`` parameter
#: (contract_helpers.pg_dsn fails one that is not marked ``pg``, so the list cannot fall behind).
PG_TESTS = {
    "aisdk/test_aisdk.py::test_resume_and_stop_across_servers_on_one_postgresql_store",
    "backends/test_live_streams.py::test_postgres_live_table_reconnects_after_its_connection_was_killed",
    "backends/test_store_backends.py::test_memory_and_postgres_answer_alike",
    "backends/test_store_backends.py::test_async_store_over_postgres",
    # by their whole node id (a class's unittest case; a parameter that is a class)
    "integrations/test_conversation_store_stateful.py::TestPostgres::runTest",
    "integrations/test_conversation_store_stateful.py::test_soak[PostgresCompare]",
}
#: The backends' parameter values that are a PostgreSQL recorder (contract_helpers.FACTORIES, ``kind``).
PG_PARAMS = {"postgres", "postgres-p4"}
#: The measured slowest tests (tests/slow_tests.txt: how they were measured).
SLOW_TESTS = {line for line in (TESTS / "slow_tests.txt").read_text().splitlines() if line and line[0] != "#"}


def _markers(item: pytest.Item) -> set[str]:
    """Its markers: what ``item`` needs (pg, browser, node, fuse: by where it is and how it is parametrized),
    and slow."""
    path = item.path.relative_to(TESTS).as_posix()
    params = getattr(item, "callspec", None)
    key = f"{path}::{getattr(item, 'originalname', item.name)}"  # without the parameters
    needs = {"slow"} if key in SLOW_TESTS else set()
    node = f"{path}::{item.nodeid.split('::', 1)[1]}" if "::" in item.nodeid else key
    if (path.startswith("postgres/") or key in PG_TESTS or node in PG_TESTS
            or (params is not None and any(isinstance(v, str) and v in PG_PARAMS for v in params.params.values()))):
        needs.add("pg")
    if path.startswith("aisdk/"):
        needs.add("node")
    if path.startswith("server/test_browser") or path == "aisdk/test_usechat_page.py":  # chromium, selenium
        needs.add("browser")
    if path == "test_powerloss.py":
        needs.add("fuse")
    return needs


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in sorted(_markers(item)):
            item.add_marker(name)
    if config.getoption("--soak", default=False):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        # the marker, not ``item.keywords``: those hold the checkout directory's name too
        if item.get_closest_marker("soak") is not None:
            item.add_marker(skip)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    pg_server.running_marked = item.get_closest_marker("pg") is not None


# --------------------------------------------------------------------------- event builders


def started(tid: str, **kw: Any) -> ThreadStarted:
    return ThreadStarted(thread_id=tid, created_at=T, **kw)


def user(text: str = "hello") -> UserTurnSubmitted:
    return UserTurnSubmitted(turn=UserTurn(submitted_at=T, parts=[UserPromptPart(content=text)]))


def agent_start(agent: str = "a1") -> AgentTurnStarted:
    return AgentTurnStarted(agent_id=agent, started_at=T)


def response(text: str = "ok", agent: str = "a1") -> MessageRecorded:
    return MessageRecorded(message=ResponseMessage(timestamp=T, agent_id=agent, parts=[TextPart(content=text)]))


def spawn_message(child: str, agent: str = "a1") -> MessageRecorded:
    return MessageRecorded(
        message=SystemMessage(timestamp=T, event_type="data-tp-thread_spawn", event_data={"spawned_thread_id": child},
                              source_agent=agent)
    )


def completed() -> AgentTurnCompleted:
    return AgentTurnCompleted(completed_at=T)


def register(agent: str = "a1") -> AgentRegistered:
    return AgentRegistered(agent=AgentConfig(agent_id=agent, agent_name=agent.upper(), created_at=T))


def link(target: str, relation: str = "referenced") -> LinkAdded:
    return LinkAdded(link=ThreadLink(thread_id=target, relation=relation), at=T)


def exchange(text: str = "q", answer: str = "a", agent: str = "a1") -> list[Any]:
    """A whole user turn plus a completed agent turn with one response."""
    return [user(text), agent_start(agent), response(answer, agent), completed()]


def ids(n: int, prefix: str = "e") -> list[str]:
    """``n`` fresh, distinct event ids."""
    u = uuid.uuid4().hex[:8]
    return [f"{prefix}-{u}-{i}" for i in range(n)]


# --------------------------------------------------------------------------- snapshots


def snapshot(store: Store) -> dict[str, Any]:
    """Everything observable about a store's contents (for "nothing was written" checks)."""
    # ``dicts`` left out: the first dictionary is trained by a background thread
    # (auto_dictionary) whenever the log crosses its threshold, not by the operation checked.
    tables = {name: t["entries"] for name, t in store.stats()["tables"].items() if name != "dicts"}
    events = [(e.position, e.thread_id, e.seq, e.event_id, e.recorded_at, e.event) for e in store.read_all()]
    page = store.threads(limit=10_000, include_deleted=True)
    return {
        "tables": tables,
        "events": events,
        "last_position": store.last_position,
        "heads": [store.head(h.thread_id) for h in page.threads],
        "threads": [h.thread_id for h in page.threads],
    }


# --------------------------------------------------------------------------- a Store that records its groups


class ToyStore(Store):
    """A Store for tests of storage mechanics on toy data (ids like ``"t"``, agents never
    registered): ``check_rules=False`` unless given, so only the order rules apply.
    A test module that imports it as ``Store`` gets it from ``open_store`` too. The
    validation rules themselves, and how they meet the mechanics, are tests/protocol/test_rules.py's."""

    def __init__(self, path: str | os.PathLike[str], **options: Any) -> None:
        options.setdefault("check_rules", False)
        super().__init__(path, **options)


class HookedStore(ToyStore):
    """An LMDB store whose group commit runs this object's ``_commit`` (tests override
    it to hold or count groups; ``super()._commit(batch)`` commits)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        rec: Any = self.backend
        self._rec_commit = type(rec)._commit.__get__(rec)
        rec._commit = self._commit

    @property
    def _gc(self) -> Any:
        return cast(Any, self.backend)._gc

    @property
    def _cond(self) -> Any:
        return cast(Any, self.backend)._cond

    def _commit(self, batch: list[Any]) -> None:
        self._rec_commit(batch)


class CountingStore(HookedStore):
    """Records every commit group. The first group waits (at most 10 s) until
    ``gate`` appends are in it or queued behind it, so that the next group is
    certain to hold the rest together."""

    gate = 0

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.groups: list[list[tuple[str, Any, AppendResult | None, BaseException | None]]] = []

    def _commit(self, batch: list[Any]) -> None:
        if not self.groups and self.gate:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with self._cond:
                    if len(batch) + len(self._gc.queue) >= self.gate:
                        break
                time.sleep(0.001)
        super()._commit(batch)
        self.groups.append([(r.thread_id, r.expected, r.result, r.error) for r in batch])


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    seed = int(os.environ.get("TPLOG_TEST_SEED", random.randrange(2**32)))
    print(f"\n{request.node.nodeid}: random seed {seed} (rerun with TPLOG_TEST_SEED={seed})")
    return random.Random(seed)


@pytest.fixture
def open_store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Store]]:
    """Factory: ``open_store(path=None, cls=Store, **options)``; every store is closed at teardown.
    ``cls`` defaults to the test module's ``Store`` (``ToyStore`` where it imports that as ``Store``)."""
    opened: list[Store] = []
    module_store = getattr(request.module, "Store", Store)
    default_cls = module_store if isinstance(module_store, type) and issubclass(module_store, Store) else Store

    def factory(path: str | os.PathLike[str] | None = None, *, cls: type[Store] | None = None,
                **options: Any) -> Store:
        s = (cls or default_cls)(path if path is not None else tmp_path / "store", **options)
        opened.append(s)
        return s

    yield factory
    for s in reversed(opened):
        s.close()


@pytest.fixture
def store(open_store: Callable[..., Store]) -> Store:
    return open_store()
