"""Serve a tplog store over HTTP: Vercel AI SDK chat, thread reads, live tails (``tplog[server]``).

Why Starlette: Pydantic AI's own Vercel AI adapter (``VercelAIAdapter.dispatch_request``,
``UIEventStream.streaming_response``) is built on Starlette requests and
responses, so Starlette is already what the chat endpoint's stream machinery
speaks; it is a small ASGI toolkit (no ORM, no DI framework) and runs under any
ASGI server. Uvicorn runs it (``serve()`` / ``tplog serve``).

Endpoints
---------

``POST /api/chat``
    A Vercel AI SDK UI request (``{"trigger": "submit-message", "id": CHAT_ID,
    "messages": [...]}``; the chat id names the thread: a UUID is the thread id,
    any other id its :func:`~tplog.integrations.vercel.thread_id_for_chat` UUIDv5,
    kept in the new thread's metadata as ``"vercel:chat_id"``; every endpoint
    takes either). Runs the agent (the
    body's ``"agent"`` field or ``?agent=`` picks one of ``agents``; default: the
    first) on the *recorded* history of the thread (the store is the source of
    truth: only the request's last message is read -- the user's new message,
    or, SDK v6, its ``approval-responded`` tool parts and the client-side tool
    results of calls waiting for one, ``output-available``/``output-error``
    tool parts from ``addToolOutput``) and streams the UI
    message stream with tplog's ``data-tp-*`` chunks (see
    :mod:`tplog.integrations.vercel`) while recording the run message by
    message. A new thread is created (``ThreadStarted`` + ``AgentRegistered``)
    in the same atomic append as the first turn. ``If-Match: N`` makes the
    request conditional on the thread's version (``0``: the thread must not
    exist). The response starts only once the turn's first append committed, so
    a conflict is a clean ``409`` with nothing written. AI SDK v6 ``regenerate-message`` and
    edit-and-resend (``messageId`` naming the user message that ends ``messages``) answer on a
    new branch, a fork of the chat's thread; the chat id names its newest branch
    (:mod:`tplog.integrations.branches`).

    A client that goes away does not lose the run. ``on_disconnect="finish"``
    (default): the run goes on in the server and is recorded to its end;
    ``"interrupt"``: the run is cancelled and recorded as an interrupted turn
    (v0.0.4 ``AgentTurnInterrupted``, reason ``disconnect_reason``, default
    ``network_failure`` -- what a client assembling the broken stream records
    too); the complete cycles before it are kept. Runs still going at shutdown
    get ``shutdown_grace`` seconds, counted from the SIGTERM/SIGINT, then are
    interrupted (reason ``server_shutdown``) and their streams end.

``GET /api/chat/{id}/stream``
    What ``useChat({resume: true})`` calls on mount and after a dropped connection: 204 when
    the thread has no open turn; else the open turn's UI chunks from its ``start``, then live
    to its end, from the store's live table (beside the log), so any worker or server on the
    store answers (:mod:`tplog.integrations.resume`). A new message while a turn runs with its
    client gone (the user pressed stop) interrupts that run (``user_cancelled``) or waits for it
    (``after_stop``); while its client still reads it, it is a 409 ``turn_open``.

``GET /api/chat/{id}/messages``
    The thread as the AI SDK's UI messages (a JSON array; ``[]`` for a chat not started yet),
    with the ids the chat showed: what a reloaded ``useChat`` page starts from
    (:mod:`tplog.integrations.ui_messages`).

``POST /threads/{id}/approvals``
    ``{"approvals": {CALL_ID: true | false | {"approved": false, "reason": "..."}},
    "results": {CALL_ID: value}}``: decisions for every deferred tool call the
    thread's last turn ended on (see ``/pending``); continues the run, streamed
    like ``/api/chat``.

``GET /threads`` (``?limit=&after=&include_deleted=1``, filters ``status`` (repeatable), ``agent``,
``title``, ``meta=KEY=VALUE`` (repeatable), ``created_after`` … ``updated_before``, ``roots=1``,
``has_children=1|0``: as ``Store.threads``), ``GET /threads/{id}``
(ThreadProtocol v0.0.4 JSON), ``/threads/{id}/turns``, ``/pending``,
``/interrupts``, ``/children`` (``?limit=&after=&recursive=1&max_depth=``),
``/links`` (``?incoming=1&relation=``), ``/family`` (``?up=&down=&limit=``: the family tree,
:mod:`tplog.integrations.server.family`); ``POST /threads/{id}/fork`` (``{"at": SEQ, "thread_id": NEW,
"reason": ...}`` → 201 with the append result: ``Store.fork``)
    Read-only views, JSON. ``/children`` and ``/links?incoming=1`` also answer for
    a thread stored elsewhere that a stored thread links to; as ``Store.children``,
    a deleted thread is nobody's child.

``GET /threads/{id}/events``
    The thread's events as Server-Sent Events, then a live tail: ``id:`` is the
    event's seq, ``event:`` its type, ``data:`` ``{seq, position, event_id,
    recorded_at, type, event}``. Reconnect with ``Last-Event-ID`` (or
    ``?after=SEQ``) to resume exactly after the last event seen. New events are
    found through one watcher thread per worker blocked in
    :meth:`Store.wait_for_position` (woken at once by appends of this worker,
    polling the file for appends by other workers/processes). ``?follow=0``
    returns what is there and ends. A deleted thread's tail ends with its
    tombstone.

Errors are JSON ``{"error": {"status", "code", "message", ...}}``: malformed
JSON 400, a body of the wrong shape 422 (naming the field), unknown thread 404,
deleted thread 410, version/turn conflicts 409, body too large 413. A rejected
request writes nothing. Resource limits (:class:`ServerLimits`, ``create_app(limits=...)``,
``TPLOG_SERVER_LIMITS``): request shape and depth (413), too many runs or streams (503; per
client 429), a body sent too slowly (408), a run's length (recorded ``timeout``).

Access (:class:`Security`, :mod:`.security`): with a token every route but ``/health`` needs
``Authorization: Bearer TOKEN`` (the page: ``/?token=TOKEN`` once, then a cookie) else 401; with
users (a token per user, a trusted proxy's header, or your authenticator) each request reads and
writes its user's scope only, and another user's thread is a 404. Always: a Host naming neither
loopback nor the address connected to (nor ``allowed_hosts``) is 421; a POST needs
``Content-Type: application/json`` (415) and, with an ``Origin``, the server's own or an allowed
one (403). Every response carries a Content-Security-Policy, ``nosniff`` and ``no-referrer``.

The store is opened per worker process, in the ASGI lifespan (after uvicorn
forked/spawned the worker): LMDB handles must not cross ``fork()``. With
several workers uvicorn needs an import string: :func:`app_from_env` is that
factory (``TPLOG_SERVER_STORE`` etc., see below).
"""

from __future__ import annotations

from tplog.integrations.http import HTTPError as HTTPError
from tplog.integrations.http import http_error as http_error
from tplog.integrations.server.app import create_app
from tplog.integrations.server.config import (
    ENV_AFTER_STOP,
    ENV_AGENTS,
    ENV_DURABILITY,
    ENV_METRICS,
    ENV_ON_DISCONNECT,
    ENV_RESUMABLE,
    ENV_SHUTDOWN_GRACE,
    ENV_STORE,
    ENV_TP_CHUNKS,
    AppendTimings,
    ServeError,
)
from tplog.integrations.server.demo_agents import demo_agents
from tplog.integrations.server.factory import app_from_env, serve
from tplog.integrations.server.limits import ENV_LIMITS, ServerLimits
from tplog.integrations.server.security import Security

__all__ = [
    "ENV_AFTER_STOP",
    "ENV_AGENTS",
    "ENV_DURABILITY",
    "ENV_LIMITS",
    "ENV_METRICS",
    "ENV_ON_DISCONNECT",
    "ENV_RESUMABLE",
    "ENV_SHUTDOWN_GRACE",
    "ENV_STORE",
    "ENV_TP_CHUNKS",
    "AppendTimings",
    "Security",
    "ServeError",
    "ServerLimits",
    "app_from_env",
    "create_app",
    "demo_agents",
    "serve",
]
