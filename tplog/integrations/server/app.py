"""The Starlette app (:func:`create_app`): the routes and their request helpers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tplog.aio import AsyncStore
from tplog.errors import NotFoundError, ThreadDeletedError, TplogError
from tplog.events import RecordedEvent, ThreadDeleted
from tplog.integrations import branches
from tplog.integrations.browser import browser_routes
from tplog.integrations.http import SSE_HEADERS, HTTPError, http_error
from tplog.integrations.http import SSEResponse as _SSEResponse
from tplog.integrations.http import error_response as _error_response
from tplog.integrations.resume import AfterStop, resume_response
from tplog.integrations.scheduled_prune import PruneSchedule
from tplog.integrations.server.config import AppendTimings, OnDisconnect, TpChunks
from tplog.integrations.server.family import family_route
from tplog.integrations.server.limits import ServerLimits, check_chat_shape, check_depth, check_fork_id, held
from tplog.integrations.server.security import SecureApp, Security, redact_access_log
from tplog.integrations.server.state import Server, new_message_id, path_thread, thread_for
from tplog.integrations.server.wakeups import wait
from tplog.integrations.vercel import CHAT_ID_KEY, MESSAGE_ID_KEY, client_tool_results, thread_id_for_chat
from tplog.integrations.vercel.body import check_user_message
from tplog.logs import set_thread_id
from tplog.protocol import model as m
from tplog.protocol.json import to_builtins, to_json
from tplog.store import Store

__all__ = ["create_app"]


log = logging.getLogger("tplog.server")

_TAIL_PAGE: Final = 500  # events read per step of a tail
# ASCII digits, at most 18 (an int64): str.isdigit() also takes '²', which int() refuses
_DIGITS: Final = re.compile(r"[0-9]{1,18}")
_PARSE_INLINE: Final = 256 << 10  # bodies from this size on are parsed in a thread
_VALIDATE_INLINE: Final = 64  # last messages with more parts are validated in a thread

# --------------------------------------------------------------------------- request helpers


async def _json_body(request: Request, limit: int, timeout: float = 0.0) -> dict[str, Any]:
    cl = request.headers.get("content-length")
    if cl is not None and cl.isdigit() and int(cl) > limit:
        raise HTTPError(413, "too_large", f"request body is {cl} bytes; at most {limit} are accepted")
    from starlette.requests import ClientDisconnect

    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout or None):  # a client sending its body slowly holds a worker's connection
            async for chunk in request.stream():
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    raise HTTPError(413, "too_large", f"request body is over {limit} bytes")
    except ClientDisconnect:
        raise HTTPError(400, "client_disconnected", "the client went away while sending the body") from None
    except TimeoutError:
        raise HTTPError(408, "body_timeout", f"the request body did not arrive within {timeout:g} s") from None
    raw = b"".join(chunks)
    if not raw.strip():
        raise HTTPError(400, "empty_body", "the request needs a JSON body")
    try:
        # a large body is parsed off the event loop: the other requests of the worker go on meanwhile
        data = json.loads(raw) if size < _PARSE_INLINE else await asyncio.to_thread(json.loads, raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HTTPError(400, "malformed_json", f"the body is not valid JSON: {exc}") from exc
    except RecursionError:  # json's decoder recurses per nesting level
        raise HTTPError(400, "malformed_json", "the body's JSON is nested too deeply") from None
    if not isinstance(data, dict):
        raise HTTPError(422, "invalid_body", f"the body must be a JSON object, not {type(data).__name__}")
    return data


async def _chat_branch(srv: Server, root: str) -> str:
    """The chat's newest branch (:mod:`tplog.integrations.branches`): what its chat endpoints answer for."""
    tid, k = await asyncio.to_thread(branches.current, srv.store, root)
    if k:
        set_thread_id(tid)
    return tid


def _client(request: Request) -> str | None:
    return request.client.host if request.client is not None else None


def _if_match(request: Request) -> int | None:
    v = request.headers.get("if-match")
    if v is None:
        return None
    v = v.strip().strip('"')
    if not _DIGITS.fullmatch(v):
        raise HTTPError(400, "bad_if_match", f"If-Match must be a thread version (an integer ≥ 0), not {v!r}")
    return int(v)


def _thread_filters(request: Request) -> dict[str, Any]:
    """``Store.threads`` filters from the query string (bad values: the store's InvalidInputError)."""
    from tplog.lifecycle import parse_meta, parse_time

    q = request.query_params
    hc = q.get("has_children")
    # ?status= is ?activity='s deprecated old name (a thread's status is whether it is deleted)
    if q.getlist("activity") and q.getlist("status"):
        raise HTTPError(422, "invalid_parameter", "pass activity= only (status= is its deprecated old name)")
    return {"activity": q.getlist("activity") or q.getlist("status") or None, "agent": q.get("agent") or None,
            "title": q.get("title") or None, "metadata": parse_meta("meta", q.getlist("meta")),
            "roots": _flag(request, "roots"),
            "has_children": None if hc is None or hc == "" else _flag(request, "has_children"),
            **{n: parse_time(n, q.get(n)) for n in ("created_after", "created_before", "updated_after",
                                                    "updated_before")}}


def _int_param(request: Request, name: str, default: int | None, *, lo: int = 0, hi: int | None = None) -> int | None:
    v = request.query_params.get(name)
    if v is None or v == "":
        return default
    try:
        n = int(v)
    except ValueError:
        raise HTTPError(422, "invalid_parameter", f"query parameter {name!r} must be an integer, not {v!r}") from None
    if n < lo or (hi is not None and n > hi):
        rng = f"{lo}..{hi}" if hi is not None else f"≥ {lo}"
        raise HTTPError(422, "invalid_parameter", f"query parameter {name!r} must be in {rng}, not {n}")
    return n


def _flag(request: Request, name: str) -> bool:
    v = request.query_params.get(name, "")
    if v.lower() in ("", "0", "false", "no"):
        return False
    if v.lower() in ("1", "true", "yes"):
        return True
    raise HTTPError(422, "invalid_parameter", f"query parameter {name!r} must be 1/0/true/false, not {v!r}")


def _plain(obj: Any) -> Any:
    """Result structs as JSON objects (heads are msgpack arrays on disk, objects here)."""
    if isinstance(obj, m._Base):
        return to_builtins(obj)
    if isinstance(obj, msgspec.Struct):
        return {f: _plain(getattr(obj, f)) for f in obj.__struct_fields__}
    if isinstance(obj, (list, tuple)):
        return [_plain(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return msgspec.to_builtins(obj)


def _json(obj: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status_code=status, media_type="application/json")


def _ui_errors(exc: Any, last: int = 0) -> list[dict[str, Any]]:
    """The validation errors, located in the client's body (``last``: the index of the one message validated)."""
    def loc(path: Any) -> str:
        parts = list(path)
        for i in range(len(parts) - 1):
            if parts[i] == "messages" and parts[i + 1] == 0:
                parts[i + 1] = last
                break
        return ".".join(str(p) for p in parts)

    return [
        {"loc": loc(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")}
        for e in exc.errors(include_url=False, include_context=False, include_input=False)[:20]
    ]


def _event_row(e: RecordedEvent) -> dict[str, Any]:
    return {
        "seq": e.seq,
        "position": e.position,
        "event_id": e.event_id,
        "recorded_at": e.recorded_at,
        "type": e.event.__struct_config__.tag,
        "event": to_builtins(e.event),
    }

# --------------------------------------------------------------------------- the app


def create_app(
    store: str | os.PathLike[str] | Store | AsyncStore,
    agents: Mapping[str, Any],
    *,
    on_disconnect: OnDisconnect = "finish",
    disconnect_reason: str = "network_failure",
    shutdown_grace: float = 30.0,
    store_options: Mapping[str, Any] | None = None,
    sdk_version: int = 6,
    tail_poll: float = 0.05,
    heartbeat: float = 15.0,
    max_body: int = 16 << 20,
    metrics: AppendTimings | None = None,
    metrics_path: str | None = None,
    tp_chunks: TpChunks = "transient",
    after_stop: AfterStop = "interrupt",
    after_stop_wait: float = 30.0,
    live_flush: float = 0.05,
    resumable: bool = True,
    prune: PruneSchedule | None = None,
    security: Security | None = None,
    limits: ServerLimits | None = None,
) -> Starlette:
    """The ASGI app serving ``store`` (a directory, opened per worker in the lifespan, or an
    open ``Store``/``AsyncStore`` the caller keeps owning) with ``agents`` (name -> Pydantic AI agent).

    ``on_disconnect``: ``"finish"`` -- a run whose client went away is run and recorded to its
    end; ``"interrupt"`` -- it is cancelled and recorded as interrupted with ``disconnect_reason``.
    ``store_options`` go to :class:`Store` (e.g. ``durability``). ``tail_poll``: how often event
    tails look for appends by other processes; ``heartbeat``: SSE keep-alive comment interval.
    ``metrics``: an :class:`AppendTimings` (or anything with its ``append``/``request`` methods)
    timing every append; dumped to ``metrics_path.PID.json`` at shutdown when given.
    ``shutdown_grace``: seconds running runs get at shutdown before they are interrupted
    (``server_shutdown``), counted from the SIGTERM/SIGINT when the ASGI server runs the app in
    its main thread with its own signal handlers (uvicorn does), else from the lifespan's end.
    Under your own uvicorn, set its ``timeout_graceful_shutdown`` above the grace (``serve`` uses
    grace + 15 s): uvicorn cuts the responses still open when it runs out.
    ``tp_chunks``: ``"transient"`` (default) sends the ``data-tp-*`` chunks transient (the AI SDK
    client passes them to ``onData`` and keeps them out of its messages, which it sends back with
    every request); ``"parts"`` keeps them as data parts of the assistant message, for clients that
    assemble the thread from stored UI messages.

    Resumable streams (``GET /api/chat/{id}/stream``, ``useChat({resume: true})``): a run's UI
    chunks are written to the store's live table beside the log (batched, at most one write per
    ``live_flush`` seconds), so any worker can replay the open turn; ``resumable=False`` writes
    none (the endpoint then always answers 204, and a stop request reaches only this worker's runs).
    ``after_stop``: what a new message does while the thread's turn is still running with its
    client gone (the user pressed stop, which aborts the request, and ``on_disconnect="finish"``
    kept the run going):
    ``"interrupt"`` (default) stops that run (recorded ``user_cancelled``) and then answers;
    ``"wait"`` waits for it to end; either gives up after ``after_stop_wait`` seconds with 409
    ``turn_open``, as ``"reject"`` does at once. A run whose client is still reading it is never
    disturbed: the new message is a 409 ``turn_open``.

    ``security``: who may use the server and from where (:class:`Security`: a token, users and
    their scopes, allowed Hosts and Origins); the default needs no token and answers only Hosts
    naming this machine's loopback or the address the connection came to.
    ``limits``: the resource limits (:class:`~tplog.integrations.server.limits.ServerLimits`:
    request shape and depth, body and header read deadlines, runs at once and their length, open
    streams in all and per client).
    """
    srv = Server(
        store,
        agents,
        on_disconnect=on_disconnect,
        disconnect_reason=disconnect_reason,
        shutdown_grace=shutdown_grace,
        store_options=store_options or {},
        sdk_version=sdk_version,
        tail_poll=tail_poll,
        heartbeat=heartbeat,
        max_body=max_body,
        metrics=metrics,
        metrics_path=metrics_path,
        tp_chunks=tp_chunks,
        after_stop=after_stop,
        after_stop_wait=after_stop_wait,
        live_flush=live_flush,
        resumable=resumable,
        prune=prune,
        limits=limits,
    )
    lim = srv.limits

    async def chat(request: Request) -> Response:
        import pydantic
        from pydantic_ai.ui.vercel_ai import VercelAIAdapter
        from pydantic_ai.ui.vercel_ai.request_types import RequestData

        body = await _json_body(request, srv.max_body, lim.body_timeout)
        body.setdefault("trigger", "submit-message")
        # Only the last message is read: it alone is validated (the history was seen in full
        # before, thousands of messages, on the event loop), after a count of them all.
        check_chat_shape(body, lim)
        msgs_in = body.get("messages")
        last_in = msgs_in[-1] if isinstance(msgs_in, list) and msgs_in else None

        def validate() -> Any:
            if last_in is not None:
                check_depth(last_in, lim, "$.messages[-1]")
            return pydantic.TypeAdapter(RequestData).validate_python(
                {**body, "messages": msgs_in[-1:]} if isinstance(msgs_in, list) else body)

        parts_in = last_in.get("parts") if isinstance(last_in, dict) else None
        big = isinstance(parts_in, list) and len(parts_in) > _VALIDATE_INLINE
        try:
            # a big last message is checked in a thread: the worker's other requests go on meanwhile
            run_input = await asyncio.to_thread(validate) if big else validate()
        except pydantic.ValidationError as exc:
            errs = _ui_errors(exc, len(msgs_in) - 1 if isinstance(msgs_in, list) and msgs_in else 0)
            first = errs[0] if errs else {"loc": "", "msg": "invalid"}
            raise HTTPError(
                422,
                "invalid_body",
                f"not a Vercel AI UI request: {first['loc'] or 'body'}: {first['msg']}",
                errors=errs,
            ) from None
        check_user_message(body)  # a step-start or tool part in the user's message: 422 naming it
        regenerate = body.get("trigger") == "regenerate-message"
        chat_id = run_input.id
        if not chat_id or len(chat_id.encode()) > 512:
            raise HTTPError(422, "invalid_body", "id (the chat/thread id) must be a non-empty string ≤ 512 bytes")
        root = await thread_for(srv, chat_id)
        thread_id, branch_no = await asyncio.to_thread(branches.current, srv.store, root)
        agent_name, agent = srv.agent(body.get("agent", request.query_params.get("agent")))
        if_match = _if_match(request)
        msgs = run_input.messages
        last = msgs[-1] if msgs else None
        if regenerate and (last is None or last.role != "user"):
            raise HTTPError(422, "invalid_body", "regenerate-message: the messages must end with the user message "
                            "to answer again (what the AI SDK's regenerate() sends)")
        if regenerate or (last is not None and last.role == "user" and last.id and body.get("messageId") == last.id):
            # AI SDK v6 regenerate / edit-and-resend: the answer goes on a new branch (tplog.integrations.branches)
            assert last is not None
            at = await asyncio.to_thread(branches.point, srv.store, thread_id, last.id)
            if at is None and regenerate:
                raise HTTPError(409, "unknown_message", f"regenerate-message: thread {thread_id} has no user "
                                f"message {last.id!r} to answer again")
            if at is not None:
                head = await asyncio.to_thread(srv.store.head, thread_id)
                if if_match is not None and if_match != head.version:
                    raise HTTPError(409, "version_conflict", f"thread {thread_id}: If-Match expected version "
                                    f"{if_match}, but the thread is at version {head.version}",
                                    expected=if_match, actual=head.version)
                reason = branches.REASON_REGENERATE if regenerate else branches.REASON_EDIT
                try:
                    thread_id = await asyncio.to_thread(branches.branch, srv.store, root, branch_no, thread_id, at,
                                                        reason)
                except TplogError as exc:
                    raise http_error(exc) from exc
                set_thread_id(thread_id)
                if_match = at
        deferred: tuple[dict[str, Any], dict[str, Any]] | None = None
        client_results = False
        user_text: str | None = None
        ui_ids: tuple[str | None, str | None] = (None, None)
        if last is not None and last.role == "user":
            user_text = " ".join(getattr(p, "text", "") for p in last.parts if getattr(p, "type", "") == "text")
            ui_ids = (last.id or None, new_message_id())
        elif last is not None and last.role == "assistant":
            ui_ids = (None, last.id or None)  # the run continues the message the client shows
            from pydantic_ai import ToolFailed

            adapter = VercelAIAdapter(agent=agent, run_input=run_input, sdk_version=6)
            dtr = adapter.deferred_tool_results
            appr: dict[str, Any] = {}
            for cid, dec in (dtr.approvals if dtr is not None else {}).items():
                appr[cid] = (
                    dec if isinstance(dec, bool) else {"approved": False, "reason": getattr(dec, "message", None)}
                )
            # AI SDK v6 addToolOutput: the browser ran the tool; its result is in the assistant message
            results = {
                cid: ToolFailed(value) if kind == "error" else value
                for cid, (kind, value) in client_tool_results(body).items()
                if cid not in appr
            }
            if appr or results:
                deferred = (appr, results)
                client_results = bool(results)
        if user_text is None and deferred is None:
            raise HTTPError(
                422,
                "nothing_to_run",
                "the request's last message must be the user's new message, or an assistant message with "
                "tool approval responses or client-side tool results (output-available / output-error tool parts)",
            )
        # The run sees only the last message; the history is the thread's recorded one.
        run_body = {
            "trigger": "submit-message",
            "id": thread_id,
            "messages": [body["messages"][-1]] if user_text is not None else [],
        }
        run = await srv.start_run(
            thread_id,
            agent_name,
            agent,
            run_body,
            if_match=if_match,
            user_text=user_text,
            deferred=deferred,
            client_results=client_results,
            metadata={CHAT_ID_KEY: chat_id} if chat_id != thread_id else None,
            ui_ids=ui_ids,
        )
        return srv.stream(run)

    async def fork(request: Request) -> Response:
        thread_id = await path_thread(srv, request)
        body = await _json_body(request, srv.max_body, lim.body_timeout)
        unknown_keys = sorted(set(body) - {"at", "thread_id", "reason"})
        if unknown_keys:
            raise HTTPError(422, "invalid_body", f"unknown fields {unknown_keys}; expected at, thread_id, reason")
        check_fork_id(body.get("thread_id"))
        res = await srv.astore.fork(thread_id, body.get("at"), new_thread_id=body.get("thread_id"),  # type: ignore[arg-type]
                                    reason=body.get("reason"))
        return _json(res, status=201)
    async def chat_messages(request: Request) -> Response:
        from tplog.integrations.ui_messages import ui_messages

        tid = await _chat_branch(srv, await path_thread(srv, request))
        try:
            res = await asyncio.to_thread(srv.store.load, tid)
        except NotFoundError:  # a chat that has not sent anything yet
            return _json([])
        if res.deleted or res.thread is None:
            raise HTTPError(410, "thread_deleted", f"thread {tid} was deleted")
        return _json(await asyncio.to_thread(ui_messages, res.thread))

    async def chat_stream(request: Request) -> Response:
        tid = await _chat_branch(srv, await path_thread(srv, request))
        if not srv.resumable:
            return Response(status_code=204, headers={"x-tplog-worker": str(os.getpid())})
        release = srv.stream_slots.acquire(_client(request))
        try:
            resp = await resume_response(srv, tid)
        except BaseException:
            release()
            raise
        if resp.status_code != 200:
            release()
            return resp
        return held(resp, release)

    async def approvals(request: Request) -> Response:
        thread_id = await path_thread(srv, request)
        body = await _json_body(request, srv.max_body, lim.body_timeout)
        check_depth(body, lim, "$")  # before anything is written: the run would fail to record a deeper result
        appr = body.get("approvals", {})
        results = body.get("results", {})
        if not isinstance(appr, dict) or not isinstance(results, dict):
            raise HTTPError(422, "invalid_body", "'approvals' and 'results' must be objects keyed by tool_call_id")
        if not appr and not results:
            raise HTTPError(422, "invalid_body", "give 'approvals' and/or 'results' for the pending tool calls")
        for cid, dec in appr.items():
            ok = isinstance(dec, bool) or (
                isinstance(dec, dict)
                and isinstance(dec.get("approved"), bool)
                and isinstance(dec.get("reason", ""), str | None)
            )
            if not ok:
                raise HTTPError(
                    422,
                    "invalid_body",
                    f'approvals[{cid!r}] must be true, false or {{"approved": bool, "reason": str}}',
                    path=f"$.approvals[{json.dumps(cid)}]",
                )
        unknown_keys = sorted(set(body) - {"approvals", "results", "agent"})
        if unknown_keys:
            raise HTTPError(422, "invalid_body", f"unknown fields {unknown_keys}; expected approvals, results, agent")
        store = srv.store
        try:
            res = await asyncio.to_thread(store.load, thread_id)
        except TplogError as exc:
            raise http_error(exc) from exc
        if res.deleted:
            raise HTTPError(410, "thread_deleted", f"thread {thread_id} was deleted")
        name = body.get("agent")
        agent_turns = [t for t in res.thread.turns if isinstance(t, m.AgentTurn)] if res.thread is not None else []
        # the continued run streams into the assistant message the previous run began
        message_id = agent_turns[-1].extra.get(MESSAGE_ID_KEY) if agent_turns else None
        if name is None and res.thread is not None:
            name = agent_turns[-1].agent_id if agent_turns else None
            if name not in srv.agents:
                name = None
        agent_name, agent = srv.agent(name)
        run_body = {"trigger": "submit-message", "id": thread_id, "messages": []}
        run = await srv.start_run(
            thread_id,
            agent_name,
            agent,
            run_body,
            if_match=_if_match(request),
            user_text=None,
            deferred=(appr, results),
            ui_ids=(None, message_id if isinstance(message_id, str) else new_message_id()),
        )
        return srv.stream(run)

    async def metrics_route(request: Request) -> Response:
        if srv.prom is None:
            raise HTTPError(501, "metrics_unavailable", "/metrics needs prometheus-client: pip install 'tplog[server]'")
        body = await asyncio.to_thread(srv.prom.render)
        from tplog.integrations.metrics import CONTENT_TYPE

        return Response(body, media_type=CONTENT_TYPE, headers={"x-tplog-worker": str(os.getpid())})

    async def health(request: Request) -> Response:
        return _json({"ok": True, "pid": os.getpid(), "last_position": srv.watcher.pos})

    async def threads(request: Request) -> Response:
        limit = _int_param(request, "limit", 50, lo=1, hi=1000)
        assert limit is not None
        q = request.query_params.get("q")
        if q:
            return await search_threads(request, q, limit)
        page = await srv.astore.threads(
            limit=limit,
            after=request.query_params.get("after") or None,
            include_deleted=_flag(request, "include_deleted"),
            **_thread_filters(request),
        )
        return _json({"threads": _plain(page.threads), "next_cursor": page.cursor})

    async def search_threads(request: Request, q: str, limit: int) -> Response:
        """``/threads?q=``: the listing's thread objects, ranked by the search, each with its ``hit``."""
        from tplog.search import MAX_QUERY, SearchQueryError

        if len(q) > MAX_QUERY:
            raise HTTPError(422, "query_too_long", f"q is {len(q)} characters; at most {MAX_QUERY} are accepted")
        filters = _thread_filters(request)
        try:
            page = await srv.astore.search(q, limit=limit, after=request.query_params.get("after") or None, **filters)
        except SearchQueryError as exc:
            raise HTTPError(422, "invalid_query", str(exc)) from exc
        hits = [{**_plain(h.head), "hit": {"turn": h.turn, "seq": h.seq, "field": h.field, "snippet": h.snippet,
                                           "score": h.score, "matches": h.matches}} for h in page.hits]
        return _json({"threads": hits, "next_cursor": page.cursor, "search": {"behind": page.behind}})

    async def thread(request: Request) -> Response:
        th = await asyncio.to_thread(srv.store.thread, await path_thread(srv, request))
        return Response(to_json(th), media_type="application/json")

    async def turns(request: Request) -> Response:
        tid = await path_thread(srv, request)
        res = await asyncio.to_thread(srv.store.load, tid)
        if res.deleted or res.thread is None:
            raise HTTPError(410, "thread_deleted", f"thread {tid} was deleted")
        return _json(
            {
                "thread_id": res.thread.thread_id,
                "version": res.seq,
                "turns": to_builtins(res.thread.turns),
                "in_progress": to_builtins(res.in_progress) if res.in_progress is not None else None,
            }
        )

    async def pending(request: Request) -> Response:
        return _json(_plain(await asyncio.to_thread(srv.store.pending, await path_thread(srv, request))))

    async def interrupts(request: Request) -> Response:
        return _json(_plain(await asyncio.to_thread(srv.store.interrupts, await path_thread(srv, request))))

    async def children(request: Request) -> Response:
        tid = await path_thread(srv, request)
        store = srv.store  # its queries raise NotFoundError (404) for a thread neither stored nor linked to
        max_depth = _int_param(request, "max_depth", None, lo=1)
        if _flag(request, "recursive") or max_depth is not None:
            rows = await asyncio.to_thread(store.descendants, tid, max_depth=max_depth)
            return _json({"thread_id": tid, "descendants": [{"thread_id": t, "depth": d} for t, d in rows]})
        limit = _int_param(request, "limit", None, lo=1)
        kids = await asyncio.to_thread(store.children, tid, limit=limit, after=request.query_params.get("after"))
        return _json({"thread_id": tid, "children": kids})

    async def links(request: Request) -> Response:
        tid = await path_thread(srv, request)
        store = srv.store
        relation = request.query_params.get("relation") or None
        if _flag(request, "incoming"):
            limit = _int_param(request, "limit", None, lo=1)
            after_id = request.query_params.get("after") or None
            after_rel = request.query_params.get("after_relation") or relation
            if after_id is not None and after_rel is None:
                raise HTTPError(400, "bad_after", "after needs after_relation (or relation): the pair to resume after")
            after = (after_id, after_rel) if after_id is not None and after_rel is not None else None
            rows = await asyncio.to_thread(store.incoming, tid, relation=relation, limit=limit, after=after)
            return _json({"thread_id": tid, "incoming": [{"thread_id": t, "relation": r} for t, r in rows]})
        lks = await asyncio.to_thread(store.links, tid)
        return _json(
            {"thread_id": tid, "links": [to_builtins(lk) for lk in lks if relation is None or lk.relation == relation]}
        )

    async def events(request: Request) -> Response:
        tid = await path_thread(srv, request)
        last_id = request.headers.get("last-event-id")
        if last_id is not None and last_id.strip():
            if not _DIGITS.fullmatch(last_id.strip()):
                raise HTTPError(400, "bad_last_event_id", f"Last-Event-ID must be an event seq, not {last_id!r}")
            after = int(last_id.strip())
        else:
            after = _int_param(request, "after", 0) or 0
        follow = request.query_params.get("follow") is None or _flag(request, "follow")
        store = srv.store
        key = (await asyncio.to_thread(store.head, tid)).thread_id  # 404 before the stream starts
        wakeups = srv.wakeups
        heartbeat = srv.heartbeat

        async def gen() -> AsyncIterator[str]:
            if srv.prom is not None:
                srv.prom.sse.inc()
            try:
                async for chunk in tail():
                    yield chunk
            finally:
                if srv.prom is not None:
                    srv.prom.sse.dec()

        async def tail() -> AsyncIterator[str]:
            with wakeups.watching(key):  # woken by appends to this thread only (the watcher knows which)
                async for chunk in tail_of():
                    yield chunk

        async def tail_of() -> AsyncIterator[str]:
            last = after
            yield "retry: 1000\n\n"
            while True:
                woken = wakeups.event(key)  # before the read: an append after it wakes us
                evs = await asyncio.to_thread(store.read, tid, after=last, limit=_TAIL_PAGE)
                for e in evs:
                    if e.seq <= last:  # pragma: no cover - reads are by seq
                        continue
                    last = e.seq
                    data = msgspec.json.encode(_event_row(e)).decode()
                    yield f"id: {e.seq}\nevent: {e.event.__struct_config__.tag}\ndata: {data}\n\n"
                    if isinstance(e.event, ThreadDeleted):
                        return
                if len(evs) >= _TAIL_PAGE:
                    continue  # more of the backlog: no waiting
                if not follow or srv.closing:
                    return
                if not await wait(woken, heartbeat):
                    yield ": keep-alive\n\n"

        resp = _SSEResponse(
            gen(), media_type="text/event-stream", headers={**SSE_HEADERS, "x-tplog-worker": str(os.getpid())}
        )
        return held(resp, srv.stream_slots.acquire(_client(request))) if follow else resp

    def guarded(fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def wrapper(request: Request) -> Response:
            path_id = request.path_params.get("thread_id")
            if isinstance(path_id, str):  # this request's log lines (uvicorn's access line too) name it
                set_thread_id(path_id)
            resp = await handle(request)
            if resp.status_code >= 400 and srv.prom is not None:
                srv.prom.error(resp.status_code, getattr(resp, "tplog_code", "error"))
            return resp

        async def handle(request: Request) -> Response:
            try:
                resp: Response = await fn(request)
                return resp
            except HTTPError as exc:
                return _error_response(exc)
            except TplogError as exc:
                err = http_error(exc)
                path_id = request.path_params.get("thread_id")
                if isinstance(path_id, str) and isinstance(exc, (NotFoundError, ThreadDeletedError)):
                    # name the id the client sent, not the UUIDv5 a chat id was mapped to
                    err = HTTPError(err.status, err.code, err.message.replace(thread_id_for_chat(path_id), path_id),
                                    **err.extra)
                return _error_response(err)

        wrapper.__name__ = fn.__name__
        return wrapper

    routes = [
        Route("/api/chat", guarded(chat), methods=["POST"]),
        Route("/api/chat/{thread_id}/stream", guarded(chat_stream), methods=["GET"]),
        Route("/api/chat/{thread_id}/messages", guarded(chat_messages), methods=["GET"]),
        Route("/health", guarded(health), methods=["GET"]),
        Route("/threads", guarded(threads), methods=["GET"]),
        Route("/threads/{thread_id}", guarded(thread), methods=["GET"]),
        Route("/threads/{thread_id}/turns", guarded(turns), methods=["GET"]),
        Route("/threads/{thread_id}/pending", guarded(pending), methods=["GET"]),
        Route("/threads/{thread_id}/interrupts", guarded(interrupts), methods=["GET"]),
        Route("/threads/{thread_id}/children", guarded(children), methods=["GET"]),
        Route("/threads/{thread_id}/links", guarded(links), methods=["GET"]),
        Route("/threads/{thread_id}/family", guarded(family_route(srv)), methods=["GET"]),
        Route("/threads/{thread_id}/events", guarded(events), methods=["GET"]),
        Route("/threads/{thread_id}/approvals", guarded(approvals), methods=["POST"]),
        Route("/threads/{thread_id}/fork", guarded(fork), methods=["POST"]),
        Route("/metrics", guarded(metrics_route), methods=["GET"]),
        *browser_routes(),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        code = getattr(exc, "status_code", 404)
        if code == 405:
            err = HTTPError(405, "method_not_allowed", f"{request.method} is not allowed on {request.url.path}")
        else:
            err = HTTPError(
                code, "not_found" if code == 404 else "http_error", f"no route {request.method} {request.url.path}"
            )
        if srv.prom is not None:
            srv.prom.error(err.status, err.code)
        return _error_response(err)

    async def internal(request: Request, exc: Exception) -> Response:
        # uvicorn logs the traceback (Starlette re-raises after this); the client gets no internals
        err = HTTPError(500, "internal_error", f"internal error on {request.method} {request.url.path}; "
                        "the server's log has the details")
        if srv.prom is not None:
            srv.prom.error(err.status, err.code)
        return _error_response(err)

    from starlette.exceptions import HTTPException

    redact_access_log()
    app = SecureApp(security or Security(), routes=routes, lifespan=srv.lifespan,
                    exception_handlers={HTTPException: not_found, Exception: internal})
    app.state.tplog = srv
    return app
