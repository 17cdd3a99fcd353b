"""The ``tplog`` command line. Each command is a thin call of one library method.

Output is JSON on stdout (one document, or JSON lines for event streams) when
stdout is not a terminal or with ``--json``; on a terminal the same result is
shown as tables and trees (tplog.render, printed by tplog.console);
errors go to stderr as ``error: <message>`` with exit status 2 (1 for a
validation report with errors); Ctrl-C prints ``tplog: interrupted`` and exits
130; a reader that closes the pipe early (``tplog tail | head -1``) ends the command
quietly with exit status 0. Run ``tplog COMMAND --help`` for each.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from tplog.backends.dsn import redact
from tplog.errors import InvalidInputError, TplogError, WrongExpectedVersionError

if TYPE_CHECKING:
    from tplog.events import Event

__all__ = ["main"]

_out = msgspec.json.Encoder()

#: The command whose result is shown to a person (stdout is a terminal, no --json), else None: JSON.
_human: str | None = None


def _emit(obj: Any) -> None:
    from tplog.protocol.json import to_builtins

    builtins = to_builtins(_objects(obj) if _is_plain(obj) else obj)
    if _human is not None:
        from tplog.console import print_blocks
        from tplog.render import render

        print_blocks(render(_human, builtins))
        return
    data = msgspec.json.format(_out.encode(builtins), indent=2)
    sys.stdout.write(data.decode() + "\n")


def _objects(obj: Any) -> Any:
    """Result structs as JSON objects (heads are msgpack arrays on disk, objects on screen)."""
    if isinstance(obj, msgspec.Struct):
        return {f: _objects(getattr(obj, f)) for f in obj.__struct_fields__}
    if isinstance(obj, (list, tuple)):
        return [_objects(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _objects(v) for k, v in obj.items()}
    return msgspec.to_builtins(obj)


def _is_plain(obj: Any) -> bool:
    """Result structs (heads, pages, pending...) are not protocol objects: encode them as msgspec does."""
    from tplog.protocol import model as m

    if isinstance(obj, (m._Base,)):
        return False
    if isinstance(obj, list):
        return all(_is_plain(o) for o in obj)
    return True


def _read_input(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror}") from exc


@contextlib.contextmanager
def _input_named(path: str) -> Iterator[None]:
    """Errors about the input's content name the input (``<stdin>`` for ``-``)."""
    try:
        yield
    except InvalidInputError as exc:
        exc.args = (f"{'<stdin>' if path == '-' else path}: {exc.args[0] if exc.args else ''}", *exc.args[1:])
        raise


#: The names given for thread ids (the one id rule's UUIDv5 → the name): errors say both.
_named: dict[str, str] = {}


def _thread_id(given: str) -> str:
    """A thread id as every entry point takes one (``tplog.thread_id_for``): a UUID stays itself,
    any other id (an AI SDK chat id, a name) names its stable UUIDv5."""
    from tplog.protocol.validate import thread_id_for

    try:
        tid = thread_id_for(given)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if tid != given.lower():
        _named[tid] = given
    return tid


def _is_url(target: str) -> bool:
    return target == "memory:" or ("://" in target and not target.startswith("lmdb://"))


def _store(args: argparse.Namespace, *, readonly: bool = True, create: bool = False) -> Any:
    from tplog.store import Store

    if _is_url(args.store):  # a server's store (postgresql://): it has no read-only mode
        if not create and args.store.startswith(("postgresql://", "postgres://")):
            # as on LMDB, only import creates a store: a mistyped database or schema is an error, not a new store
            from tplog.backends.urls import open_backend

            open_backend(args.store, create=False).close()
        return Store(args.store)
    path = args.store.removeprefix("lmdb://")
    if os.path.exists(path) and not os.path.isdir(path):
        raise InvalidInputError(f"{args.store}: is a file, not a store directory")
    if not create and not os.path.exists(os.path.join(path, "data.mdb")):
        raise InvalidInputError(f"{args.store}: no tplog store here")
    return Store(args.store, readonly=readonly)


# --------------------------------------------------------------------------- commands


def cmd_validate(args: argparse.Namespace) -> int:
    from tplog.protocol.validate import validate_json

    report = validate_json(_read_input(args.file))
    _emit(report)
    return 0 if report.ok else 1


def cmd_hash(args: argparse.Namespace) -> int:
    from tplog.protocol.canonical import hash_json

    data = _read_input(args.file)
    with _input_named(args.file):
        digest = hash_json(data, exclude_noncanonical=not args.include_noncanonical)
    _emit({"hash": digest, "include_noncanonical": args.include_noncanonical})
    return 0


def cmd_stat(args: argparse.Namespace) -> int:
    with _store(args) as s:
        _emit(s.stats())
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    with _store(args) as s:
        s.backup(args.dest, compact=not args.no_compact)
    # LMDB writes data.mdb; PostgreSQL one COPY file per table
    size = sum(e.stat().st_size for e in os.scandir(args.dest) if e.is_file())
    _emit({"dest": args.dest, "compact": not args.no_compact, "bytes": size})
    return 0


def _import_events(args: argparse.Namespace) -> list[list[Event]]:
    """Each thread of the input as the history events to append: the one conversion of every format.

    ``threadprotocol`` documents (v0.0.3 upgraded first) give
    ``events_from_thread`` (what ``Store.import_thread`` appends); the foreign
    formats give ``importers.load_events`` as they are. They are never folded
    into a document and converted back: that would drop what only events hold,
    such as ``AgentTurnCompleted.deferred`` (the approval / external kind of
    each deferred tool call, which ``tplog pending`` reports).
    """
    data = _read_input(args.file)
    if args.format == "threadprotocol":
        from tplog.projections.fold import events_from_thread
        from tplog.protocol import model as m
        from tplog.protocol.json import from_json
        from tplog.protocol.validate import thread_id_for
        from tplog.protocol.versions import upgrade

        if args.request is not None:
            raise InvalidInputError("--request only goes with --format vercel-ui")
        from tplog.protocol.validate import validate

        with _input_named(args.file), _format_hint(data, args.format):
            thread = from_json(data, m.Thread)
            # the report `tplog validate FILE` prints: an import succeeds exactly when it has no errors ...
            validate(thread).raise_for_errors(f"thread {thread.thread_id}: ")
            upgraded = upgrade(thread)
            if upgraded is not thread:  # ... but for a v0.0.3 document that breaks a v0.0.4-only rule once upgraded
                validate(upgraded).raise_for_errors(f"thread {thread.thread_id}, upgraded to v0.0.4: ")
            if args.thread_id is not None:
                upgraded = msgspec.structs.replace(upgraded, thread_id=thread_id_for(args.thread_id))
            return [events_from_thread(upgraded)]
    try:
        from tplog.integrations.importers import load_events
    except ModuleNotFoundError as exc:
        raise InvalidInputError(
            f"--format {args.format} needs the Pydantic AI integration: pip install 'tplog[pydantic-ai]' ({exc})"
        ) from exc
    request = _read_input(args.request) if args.request is not None else None
    named = args.file if args.request is None else f"{args.file} (with --request {args.request})"
    with _input_named(named), _format_hint(data, args.format):
        return [list(events) for events in load_events(args.format, data, request=request, thread_id=args.thread_id)]


def _guess_format(data: bytes) -> str | None:
    """Which ``--format`` the input looks like (by its outer shape only), or None."""
    head = data.lstrip()[:64]
    if head.startswith((b"data:", b"event:", b"id:", b":")):
        return "vercel-ui"  # an SSE stream
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError:
        lines = [ln for ln in data.splitlines() if ln.strip()]
        return "vercel-ui" if len(lines) > 1 and all(ln.lstrip().startswith(b"{") for ln in lines) else None
    if isinstance(doc, dict) and "thread_id" in doc and "turns" in doc:
        return "threadprotocol"
    if isinstance(doc, list) and doc and all(isinstance(x, dict) for x in doc):
        if all(x.get("kind") in ("request", "response") and "parts" in x for x in doc):
            return "pydantic-ai"  # ModelMessagesTypeAdapter JSON
        if all("role" in x and "parts" in x for x in doc):
            return "vercel-ui"  # a stored UIMessage array
    return None


@contextlib.contextmanager
def _format_hint(data: bytes, fmt: str) -> Iterator[None]:
    """An input that fails to parse in ``fmt`` but looks like another format says which ``--format`` to use."""
    try:
        yield
    except InvalidInputError as exc:
        guess = _guess_format(data)
        if guess is not None and guess != fmt:
            looks = {"threadprotocol": "a ThreadProtocol document", "pydantic-ai": "a Pydantic AI message history",
                     "vercel-ui": "a Vercel AI UI stream or message array"}[guess]
            flag = "--format threadprotocol (the default)" if guess == "threadprotocol" else f"--format {guess}"
            exc.args = (f"{exc.args[0] if exc.args else ''} (this looks like {looks}: import it with {flag})",
                        *exc.args[1:])
        raise


def cmd_import(args: argparse.Namespace) -> int:
    from tplog.console import progress
    from tplog.events import ThreadStarted
    from tplog.store import NO_STREAM

    summaries: list[dict[str, Any]] = []
    with progress() as update:
        update("import: read and check", 0, None)
        threads = _import_events(args)
        n = sum(len(events) for events in threads)
        update("import: read and check", n, n)  # counted in events, as the write below is
        with _store(args, readonly=False, create=True) as s:
            for events in threads:
                first = events[0] if events else None
                if not isinstance(first, ThreadStarted):  # pragma: no cover - both conversions start with it
                    raise InvalidInputError("the input converts to no thread (no ThreadStarted event)")
                # one append: the thread is stored whole or not at all, so the bar goes from 0 to all events
                update("import: write events", 0, len(events))
                try:
                    res = s.append(first.thread_id, events, expected_version=NO_STREAM)
                except WrongExpectedVersionError as exc:  # the library's advice (expected_version=) is for API users
                    raise InvalidInputError(
                        f"thread {first.thread_id} is already in {redact(args.store)} (version {exc.actual}); "
                        "import never changes a stored thread, so importing one twice is refused (and a deleted "
                        "thread's id stays taken); give --thread-id another id, or import into another store"
                    ) from exc
                update("import: write events", len(events), len(events))
                head = s.head(first.thread_id)
                summary: dict[str, Any] = {
                    "thread_id": res.thread_id, "title": head.title, "events": len(res.event_ids),
                    "messages": head.messages, "user_turns": head.user_turns, "agent_turns": head.agent_turns,
                    "first_seq": res.first_seq, "last_seq": res.last_seq, "first_position": res.first_position,
                    "last_position": res.last_position, "duplicate": res.duplicate}
                if args.event_ids:
                    summary["event_ids"] = res.event_ids
                summaries.append(summary)
    for summary in summaries:  # after the bars are gone
        _emit(summary)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from tplog.protocol.json import to_json

    with _store(args) as s:
        thread = s.export(args.thread)
    if args.version == "0.0.3":
        from tplog.protocol.versions import downgrade

        thread = downgrade(thread)
    sys.stdout.write(to_json(thread, indent=2).decode() + "\n")
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    from tplog.protocol.json import to_builtins

    with _store(args) as s:
        events = s.read(args.thread, after=args.after, limit=args.limit,
                        direction="backward" if args.backward else "forward")
    for e in events:
        row = {"seq": e.seq, "position": e.position, "event_id": e.event_id, "recorded_at": e.recorded_at,
               "type": e.event.__struct_config__.tag, "event": to_builtins(e.event)}
        _emit_line(row, thread=False)
    return 0


def _emit_line(row: dict[str, Any], *, thread: bool) -> None:
    """One event of a stream: a JSON line, or on a terminal one line of text."""
    if _human is not None:
        from tplog.console import print_line
        from tplog.render import event_line

        print_line(event_line(row, thread=thread))
    else:
        sys.stdout.write(_out.encode(row).decode() + "\n")
    sys.stdout.flush()  # a follower (tplog tail | ...) sees each event as it comes


def cmd_tail(args: argparse.Namespace) -> int:
    from tplog.cli_views import follow

    with _store(args) as s:
        for row in follow(s, args.thread, after=args.after, limit=args.limit, timeout=args.timeout):
            _emit_line(row, thread=args.thread is None)
    return 0


def _thread_status(value: str) -> str:
    """A ``--status`` value: the JSON's ``status`` (active or deleted); an activity says where it belongs."""
    if value in ("active", "deleted"):
        return value
    from tplog.lifecycle import ACTIVITY_NAMES

    hint = f"; {value} is what a thread is doing: --activity {value}" if value in ACTIVITY_NAMES else ""
    raise argparse.ArgumentTypeError(f"a thread's status is active or deleted, as the JSON's \"status\" says{hint}")


def cmd_threads(args: argparse.Namespace) -> int:
    from tplog.lifecycle import parse_meta, parse_time

    statuses = set(args.status or ["active"])
    with _store(args) as s:
        if args.scope is not None:
            s = s.scoped(args.scope)

        def page(after: str | None, limit: int) -> Any:
            return s.threads(
                limit=limit, after=after, include_deleted=args.include_deleted or "deleted" in statuses,
                activity=args.activity, agent=args.agent, title=args.title, metadata=parse_meta("--meta", args.meta),
                created_after=parse_time("--created-after", args.created_after),
                created_before=parse_time("--created-before", args.created_before),
                updated_after=parse_time("--updated-after", args.updated_after),
                updated_before=parse_time("--updated-before", args.updated_before),
                roots=args.roots, has_children=args.has_children)

        if args.status is None or statuses == {"active", "deleted"}:
            _emit(page(args.after, args.limit))
            return 0
        # one status only: whole pages are read and filtered until --limit threads, so the cursor stays exact
        heads: list[Any] = []
        cursor = args.after
        while True:
            p = page(cursor, max(args.limit - len(heads), 1))
            heads += [h for h in p.threads if h.status in statuses]
            cursor = p.cursor
            if cursor is None or len(heads) >= args.limit:
                break
        _emit({"threads": heads, "cursor": cursor})
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    with _store(args) as s:
        _emit(s.search(args.query, scope=args.scope, limit=args.limit, after=args.after, activity=args.activity,
                       agent=args.agent, syntax="fts5" if args.fts5 else "words"))
    return 0


def cmd_turns(args: argparse.Namespace) -> int:
    from tplog.protocol.json import to_builtins

    with _store(args) as s:
        res = s.load(args.thread)
    if res.thread is None:
        raise InvalidInputError(f"thread {args.thread} has no document (deleted: {res.deleted})")
    th = res.thread
    _emit({"thread_id": th.thread_id, "turns": to_builtins(th.turns),
           "in_progress": to_builtins(res.in_progress) if res.in_progress is not None else None,
           # added after the fields above: what a person reads a thread by (its title, agents by name)
           "title": th.title if isinstance(th.title, str) else None,
           "agents": {a: c.agent_name for a, c in th.agents.items()}})
    return 0


def cmd_pending(args: argparse.Namespace) -> int:
    with _store(args) as s:
        _emit(s.pending(args.thread))
    return 0


def cmd_interrupts(args: argparse.Namespace) -> int:
    with _store(args) as s:
        _emit(s.interrupts(args.thread))
    return 0


def cmd_children(args: argparse.Namespace) -> int:
    with _store(args) as s:
        if args.recursive or args.max_depth is not None:
            rows = s.descendants(args.thread, max_depth=args.max_depth)
            _emit([{"thread_id": t, "depth": d} for t, d in rows])
        else:
            _emit(s.children(args.thread, limit=args.limit, after=args.after))
    return 0


def cmd_tree(args: argparse.Namespace) -> int:
    from tplog.cli_views import descendants_tree

    with _store(args) as s:
        _emit(descendants_tree(s, args.thread, max_depth=args.max_depth))
    return 0


def cmd_links(args: argparse.Namespace) -> int:
    from tplog.protocol.json import to_builtins

    with _store(args) as s:
        if args.incoming:
            after = tuple(args.after) if args.after is not None else None
            rows = s.incoming(args.thread, relation=args.relation, limit=args.limit, after=after)
            _emit([{"thread_id": t, "relation": r} for t, r in rows])
        elif args.limit is not None or args.after is not None:
            raise InvalidInputError("--limit and --after page the --incoming list; outgoing links are not paged")
        else:
            links = [lk for lk in s.links(args.thread) if args.relation is None or lk.relation == args.relation]
            _emit(to_builtins(links))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with _store(args, readonly=False) as s:
        _emit(s.delete_thread(args.thread, reason=args.reason))
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    with _store(args, readonly=False) as s:
        _emit(s.fork(args.thread, args.at, new_thread_id=args.new_id, reason=args.reason))
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    import datetime as dt

    from tplog.console import progress
    from tplog.retire import RetentionPolicy

    age = None
    if args.max_age is not None:
        units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
        text = args.max_age.strip().lower()
        num, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
        try:
            age = dt.timedelta(seconds=float(num) * units[unit])
        except ValueError as exc:
            raise InvalidInputError(f"--max-age: {args.max_age!r} is not a duration like 90d, 12h, 30m") from exc
    policy = RetentionPolicy(max_age=age, max_threads=args.max_threads, keep_if_linked=not args.no_keep_linked)
    with _store(args, readonly=args.dry_run) as s, progress() as update:
        if args.scope is not None:
            s = s.scoped(args.scope)
        report = s.prune(policy, dry_run=args.dry_run, confirm_all=args.confirm_all, progress=update)
    _emit(report)  # after the bars are gone
    return 0


def cmd_prune_reports(args: argparse.Namespace) -> int:
    with _store(args) as s:
        if args.scope is not None:
            s = s.scoped(args.scope)
        reports, cursor = s.prune_reports(after=args.after, limit=args.limit)
    _emit({"reports": reports, "cursor": cursor})
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    with _store(args, readonly=False) as s:
        new_id = s.train_dictionary(samples=args.samples)
    _emit({"dictionary_id": new_id, "trained": new_id != 0})
    return 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    from tplog.console import progress

    chunk = {} if args.chunk is None else {"chunk": args.chunk}
    with _store(args, readonly=False) as s, progress() as update:
        reports = s.rebuild(args.projection, verify=args.verify, force=args.force,
                            progress=lambda name, done, total: update(f"rebuild {name}", done, total), **chunk)
    _emit([{"projection": r.projection, "verify": r.verify, "events": r.events, "seconds": round(r.seconds, 3),
            "events_per_second": round(r.events_per_second), "position": r.position,
            "differences": r.differences} for r in reports])
    return 1 if any(r.differences for r in reports) else 0


def cmd_verify(args: argparse.Namespace) -> int:
    from tplog.console import progress
    from tplog.verify import verify_store

    with _store(args, readonly=False) as s, progress() as update:
        update("verify", 0, None)  # the backend reports no steps: an activity bar while it works
        rep = verify_store(s, projections=not args.no_projections)
    _emit({"ok": rep.ok, "threads": rep.threads, "events": rep.events, "blobs": rep.blobs, "problems": rep.problems,
           "skipped": rep.skipped})
    return 0 if rep.ok else 1


def cmd_copy(args: argparse.Namespace) -> int:
    from tplog.console import progress
    from tplog.copy import copy_store, open_store

    if args.chunk is not None and args.chunk < 1:
        raise InvalidInputError(f"--chunk must be ≥ 1, not {args.chunk}")
    with open_store(args.src, source=True) as src, open_store(args.dest) as dest, progress() as update:
        rep = copy_store(src, dest, chunk=args.chunk or 256, verify=not args.no_verify,
                         check_rules=args.check_rules, progress=update)
    _emit({"source": redact(args.src), "dest": redact(args.dest), "threads": rep.threads, "tombstones": rep.tombstones,
           "events": rep.events, "skipped": rep.skipped, "seconds": round(rep.seconds, 3), "verified": rep.verified,
           "mismatches": [{"thread_id": m.thread_id, "source": m.source, "dest": m.dest} for m in rep.mismatches]})
    return 0 if rep.ok else 1


def cmd_migrate(args: argparse.Namespace) -> int:
    if not args.url.startswith(("postgresql://", "postgres://")):
        raise InvalidInputError(f"tplog migrate takes a PostgreSQL URL (postgresql://…), not {redact(args.url)!r}")
    try:
        from tplog.backends.postgres.migrate import migrate
    except ImportError as exc:
        raise InvalidInputError(f"PostgreSQL stores need psycopg: pip install 'tplog[postgres]' ({exc})") from exc
    _emit(migrate(args.url))
    return 0


def _serve_limits(args: argparse.Namespace) -> Any:
    from tplog.integrations.server.limits import ServerLimits

    given = {name: v for name, v in (
        ("max_run_seconds", args.max_run_seconds), ("max_runs", args.max_concurrent_runs),
        ("max_streams", args.max_streams), ("max_streams_per_client", args.max_streams_per_client),
        ("header_timeout", args.request_timeout), ("body_timeout", args.request_timeout)) if v is not None}
    try:
        return ServerLimits(**given)
    except ValueError as exc:
        raise InvalidInputError(f"tplog serve: {exc}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from tplog.integrations.server import serve
    except ImportError as exc:
        raise InvalidInputError(f"tplog serve needs the server extra: pip install 'tplog[server]' ({exc})") from exc
    if not _is_url(args.store) and os.path.exists(args.store) and not os.path.isdir(args.store):
        raise InvalidInputError(f"{args.store}: is a file, not a store directory")
    if args.shutdown_grace < 0:
        raise InvalidInputError(f"--shutdown-grace must be ≥ 0 seconds, not {args.shutdown_grace}")
    prune = None
    if args.prune_every is not None:
        import datetime as dt

        from tplog.integrations.scheduled_prune import PruneSchedule, duration
        from tplog.retire import RetentionPolicy

        age = args.prune_max_age
        prune = PruneSchedule(every=duration(args.prune_every, "--prune-every"), policy=RetentionPolicy(
            max_age=dt.timedelta(seconds=duration(age, "--prune-max-age")) if age is not None else None,
            max_threads=args.prune_max_threads, keep_if_linked=not args.prune_no_keep_linked))
        prune.check()
    elif args.prune_max_age is not None or args.prune_max_threads is not None or args.prune_no_keep_linked:
        raise InvalidInputError("the --prune-* policy flags need --prune-every (how often to apply the policy)")
    serve(args.store, host=args.host, port=args.port, workers=args.workers, agents=args.agents,
          on_disconnect=args.on_disconnect, durability=args.durability, shutdown_grace=args.shutdown_grace,
          log_format=args.log_format, log_level=args.log_level, prune=prune, security=_serve_security(args),
          allow_unauthenticated=args.allow_unauthenticated, limits=_serve_limits(args))
    return 0


def _serve_security(args: argparse.Namespace) -> Any:
    """The serve flags over the TPLOG_SERVER_AUTH_* / …_ALLOWED_* variables."""
    from tplog.integrations.server.security import Security, read_token_file, read_users_file

    env = Security.from_env()
    return Security(token=read_token_file(args.auth_token_file) if args.auth_token_file else env.token,
                    users=read_users_file(args.auth_users_file) if args.auth_users_file else env.users,
                    user_header=args.trusted_user_header or env.user_header,
                    allowed_hosts=(*env.allowed_hosts, *args.allowed_host),
                    allowed_origins=(*env.allowed_origins, *args.allowed_origin))


# --------------------------------------------------------------------------- parser


def _count(least: int) -> type[argparse.Action]:
    """An option taking an int of at least ``least``, said in CLI terms (the library's own message
    names its Python parameter: ``limit must be None or an int ≥ 0``). Checked in the action, not
    in a ``type=`` (argparse rewords a type's ValueError, and tplog's errors are ValueErrors), so it
    prints as every other ``error: …`` line."""
    class Count(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            try:
                n = int(values)
            except ValueError:
                raise InvalidInputError(f"{option_string} must be a whole number, not {values!r}") from None
            if n < least:
                raise InvalidInputError(f"{option_string} must be {least} or more, not {n}")
            setattr(namespace, self.dest, n)

    return Count


def build_parser() -> argparse.ArgumentParser:
    from tplog import __version__

    p = argparse.ArgumentParser(prog="tplog", description="An append-only LMDB log store for ThreadProtocol threads.")
    p.add_argument("--version", action="version", version=f"tplog {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Callable[[argparse.Namespace], int], help: str, *, store: bool = True,
            thread: bool = False) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        if store:
            sp.add_argument("store", metavar="STORE", help="a store directory (or lmdb:///DIR) or a postgresql:// URL")
        if thread:
            sp.add_argument("thread", metavar="THREAD_ID", type=_thread_id,
                            help="the thread's id (a UUID, or any other id: its tplog.thread_id_for UUID)")
        if name not in ("export", "serve"):  # export prints the document itself; serve prints nothing
            sp.add_argument("--json", action="store_true",
                            help="print JSON even on a terminal (it is the output whenever stdout is not one)")
        sp.set_defaults(fn=fn)
        return sp

    sp = add("validate", cmd_validate, "Validate a ThreadProtocol JSON file; exit 1 if it has errors.", store=False)
    sp.add_argument("file", metavar="FILE", help="JSON file ('-' for stdin)")
    sp = add("hash", cmd_hash, "Print the canonical SHA-256 hash of a ThreadProtocol JSON file.", store=False)
    sp.add_argument("file", metavar="FILE", help="JSON file ('-' for stdin)")
    sp.add_argument("--include-noncanonical", action="store_true",
                    help="also hash meta:* content and data-sys-* events (excluded by default)")
    add("stat", cmd_stat, "Counts, sizes and per-table entries of a store.")
    sp = add("backup", cmd_backup, "Consistent hot copy of a live store into an empty directory.")
    sp.add_argument("dest", metavar="DEST", help="an empty or new directory")
    sp.add_argument("--no-compact", action="store_true", help="copy pages as they are (faster, no compaction)")
    sp = add("import", cmd_import, "Import a thread into a store (v0.0.3 documents are upgraded).")
    sp.add_argument("file", metavar="FILE", help="input file ('-' for stdin)")
    sp.add_argument("--format", choices=["threadprotocol", "pydantic-ai", "vercel-ui"], default="threadprotocol",
                    help="input format (default threadprotocol)")
    sp.add_argument("--request", metavar="FILE", help="vercel-ui: the UI request body the client sent")
    sp.add_argument("--thread-id", default=None, metavar="ID",
                    help="store the thread under this id (a UUID as it is, any other id as its stable UUIDv5: "
                         "tplog.thread_id_for); default: a threadprotocol document's own id, else a new UUID")
    sp.add_argument("--event-ids", action="store_true", help="also print the id of every event stored")
    sp = add("export", cmd_export, "Print a thread as ThreadProtocol JSON.", thread=True)
    sp.add_argument("--version", choices=["0.0.4", "0.0.3"], default="0.0.4", help="protocol version to write")
    sp = add("read", cmd_read, "Print a thread's raw history events as JSON lines.", thread=True)
    sp.add_argument("--after", type=int, default=None,
                    help="page on: the last seq seen (exclusive; default: from the first, or the last with --backward)")
    sp.add_argument("--limit", action=_count(0), default=None, help="at most this many events")
    sp.add_argument("--backward", action="store_true", help="newest first")
    from tplog.lifecycle import ACTIVITY_NAMES

    sp = add("threads", cmd_threads, "List threads, most recently updated first, one page at a time.")
    sp.add_argument("--limit", action=_count(1), default=50, help="threads per page (default 50)")
    sp.add_argument("--after", default=None, help="the cursor a previous page returned")
    sp.add_argument("--include-deleted", action="store_true", help="list tombstones too")
    sp.add_argument("--scope", default=None, help="list this scope's threads (default: unscoped)")
    sp.add_argument("--activity", action="append", default=None, choices=list(ACTIVITY_NAMES), metavar="ACTIVITY",
                    help="only threads doing this, as the table's activity column shows it: idle, running (an agent "
                         "turn is open; the JSON's activity \"active\"), waiting (waiting_approval or waiting_tools: "
                         "the last turn ended on deferred tool calls), interrupted; repeat for any of several")
    sp.add_argument("--status", action="append", default=None, type=_thread_status, metavar="STATUS",
                    help="only threads of this status, as the JSON's \"status\" says: active (not deleted: the "
                         "default) or deleted (tombstones only); repeat for both")
    sp.add_argument("--agent", default=None, help="only threads this agent id registered or ran a turn in")
    sp.add_argument("--title", default=None, help="only threads whose title contains this (any case)")
    sp.add_argument("--meta", action="append", default=None, metavar="KEY=VALUE",
                    help="only threads whose metadata has KEY equal to VALUE (JSON, else a string); repeatable")
    for name in ("created-after", "created-before", "updated-after", "updated-before"):
        sp.add_argument(f"--{name}", default=None, metavar="TIME",
                        help="ISO 8601 date-time (UTC if no zone) or ns; after inclusive, before exclusive")
    sp.add_argument("--roots", action="store_true", help="only threads with no spawned_from link")
    sp.add_argument("--has-children", dest="has_children", action="store_true", default=None,
                    help="only threads with spawned children")
    sp.add_argument("--no-children", dest="has_children", action="store_false",
                    help="only threads without spawned children")
    add("turns", cmd_turns, "A thread's canonical turns and the agent turn in progress.", thread=True)
    add("pending", cmd_pending, "A thread's tool calls without a return (deferred, executing, abandoned).",
        thread=True)
    add("interrupts", cmd_interrupts, "Whether and where a thread was interrupted.", thread=True)
    sp = add("children", cmd_children, "Threads spawned from a thread.", thread=True)
    sp.add_argument("--recursive", action="store_true", help="all descendants, breadth-first (cycle-safe)")
    sp.add_argument("--max-depth", type=int, default=None, help="with --recursive: how deep to go")
    sp.add_argument("--limit", action=_count(0), default=None, help="at most this many children")
    sp.add_argument("--after", default=None, help="page on: the last child id of the previous page")
    sp = add("tree", cmd_tree, "A thread's descendants (spawned children, recursively) as a tree.", thread=True)
    sp.add_argument("--max-depth", type=int, default=None, help="how deep to go (default: all the way)")
    sp = add("tail", cmd_tail, "Follow new events as they are appended (the whole store, or one thread) until "
             "Ctrl-C: JSON lines, or one line per event on a terminal.")
    sp.add_argument("thread", metavar="THREAD_ID", nargs="?", default=None, type=_thread_id,
                    help="only this thread's events")
    sp.add_argument("--after", type=int, default=None,
                    help="start after this log position (with THREAD_ID: this seq); default: the current end, "
                         "so only new events; 0 replays everything first")
    sp.add_argument("--limit", type=int, default=None, help="stop after this many events")
    sp.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                    help="stop when no new event came for this long (default: follow until Ctrl-C)")
    sp = add("search", cmd_search, "Find threads by their text: titles, prompts, responses, tool calls and returns, "
             "metadata; one hit per thread, best first.")
    sp.add_argument("query", metavar="QUERY", help="words, all required (with --fts5: an FTS5 query)")
    sp.add_argument("--limit", action=_count(1), default=20, help="threads per page (default 20)")
    sp.add_argument("--after", default=None, help="the cursor a previous page returned")
    sp.add_argument("--scope", default=None, help="search this scope's threads (default: unscoped)")
    sp.add_argument("--activity", action="append", default=None, choices=list(ACTIVITY_NAMES), metavar="ACTIVITY",
                    help="only threads doing this (as tplog threads --activity); repeatable")
    sp.add_argument("--agent", default=None, help="only threads this agent id registered or ran a turn in")
    sp.add_argument("--fts5", action="store_true", help="QUERY is FTS5 syntax (OR, NOT, \"phrases\", prefix*)")
    sp = add("links", cmd_links, "A thread's outgoing links, or with --incoming the threads linking to it.",
             thread=True)
    sp.add_argument("--incoming", action="store_true", help="threads that link to this one")
    sp.add_argument("--relation", default=None, help="only links of this relation")
    sp.add_argument("--limit", action=_count(0), default=None, help="with --incoming: at most this many (see README)")
    sp.add_argument("--after", nargs=2, default=None, metavar=("SOURCE_ID", "RELATION"),
                    help="with --incoming, page on: the last pair of the previous page")
    sp = add("delete", cmd_delete, "Hard-delete a thread (a tombstone keeps its id from reuse).", thread=True)
    sp.add_argument("--reason", default=None, help="recorded in the tombstone")
    sp = add("fork", cmd_fork, "Fork a thread at a turn boundary: a new thread with its history up to --at and "
             "a spawned_from link carrying the branch point.", thread=True)
    sp.add_argument("--at", type=int, required=True, help="the last seq the fork keeps (a turn boundary)")
    sp.add_argument("--new-id", default=None, type=_thread_id,
                    help="the fork's thread id (a UUID, or any other id: its tplog.thread_id_for UUID; default: a new "
                         "UUID)")
    sp.add_argument("--reason", default=None, help="recorded in the spawned_from link's metadata")
    sp = add("prune", cmd_prune, "Remove the threads a retention policy retires (each leaves a tombstone saying "
             "why and when; the report is kept: tplog prune-reports).")
    sp.add_argument("--max-age", default=None, metavar="DURATION",
                    help="retire threads not updated for this long (90d, 12h, 30m, 45s)")
    sp.add_argument("--max-threads", type=int, default=None, metavar="N",
                    help="keep only the newest N threads of the scope")
    sp.add_argument("--no-keep-linked", action="store_true",
                    help="retire threads other threads link to or spawned from too (the report lists the "
                         "children left dangling)")
    sp.add_argument("--dry-run", action="store_true", help="report what would go; write nothing")
    sp.add_argument("--confirm-all", action="store_true", help="allow a policy that removes every thread")
    sp.add_argument("--scope", default=None, help="prune this scope's threads (default: unscoped)")
    sp = add("prune-reports", cmd_prune_reports, "The kept prune reports, newest first.")
    sp.add_argument("--after", default=None, help="the cursor a previous page returned")
    sp.add_argument("--limit", action=_count(1), default=50, help="reports per page (default 50)")
    sp.add_argument("--scope", default=None, help="this scope's reports (default: unscoped)")
    sp = add("serve", cmd_serve, "Serve the store over HTTP: Vercel AI chat (demo agent by default), thread "
             "reads, resumable live event tails (needs tplog[server]).")
    sp.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    sp.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    sp.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    sp.add_argument("--agents", default=None, metavar="MODULE:ATTR",
                    help="a dict of Pydantic AI agents, or a callable returning one (default: the scripted demo agent)")
    sp.add_argument("--on-disconnect", choices=["finish", "interrupt"], default="finish",
                    help="when a chat client goes away: finish the run and record it (default), or interrupt it")
    sp.add_argument("--durability", choices=["durable", "relaxed"], default="durable",
                    help="fsync policy of the store (default durable)")
    sp.add_argument("--shutdown-grace", type=float, default=30.0, metavar="SECONDS",
                    help="on SIGTERM/Ctrl-C, how long running chats get to finish before they are recorded as "
                         "interrupted (server_shutdown) (default 30)")
    sp.add_argument("--log-format", choices=["text", "json"], default="text",
                    help="json: one JSON object per log line, with the thread id it is about (default text)")
    sp.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info",
                    help="the least severe log lines printed (default info; debug adds one line per append)")
    sp.add_argument("--prune-every", default=None, metavar="DURATION",
                    help="apply a retention policy this often (1h, 30m; the first run one period after start), "
                         "as tplog prune with the --prune-* flags below; each run's report is kept")
    sp.add_argument("--prune-max-age", default=None, metavar="DURATION", help="as tplog prune --max-age")
    sp.add_argument("--prune-max-threads", type=int, default=None, metavar="N", help="as tplog prune --max-threads")
    sp.add_argument("--prune-no-keep-linked", action="store_true", help="as tplog prune --no-keep-linked")
    sec = sp.add_argument_group("security", "who may use the server, and from where (README: Security)")
    sec.add_argument("--auth-token-file", default=None, metavar="FILE",
                     help="every request but /health needs Authorization: Bearer <the token in FILE>; the browser "
                          "page takes it once as /?token=… (default: $TPLOG_SERVER_AUTH_TOKEN, else no token)")
    sec.add_argument("--auth-users-file", default=None, metavar="FILE",
                     help='a JSON file {"USER": "TOKEN", …}: each token authenticates its user, who sees only '
                          "their own threads (the user is the tplog scope)")
    sec.add_argument("--trusted-user-header", default=None, metavar="NAME",
                     help="the user is this header's value (e.g. X-Forwarded-User), set by the reverse proxy in "
                          "front; each user sees only their own threads")
    sec.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                     help="answer requests for this Host too (repeatable; '*': any); always: localhost, "
                          "127.0.0.1, [::1] and the address connected to")
    sec.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                     help="let pages of this origin (https://app.example) send POSTs too (repeatable)")
    sec.add_argument("--allow-unauthenticated", action="store_true",
                     help="listen beyond loopback without a token (something in front must authenticate)")
    # the resource limits (tplog.integrations.server.limits.ServerLimits; its defaults when not given)
    sp.add_argument("--max-run-seconds", type=float, default=None, metavar="SECONDS",
                    help="stop a run still going after this long, recorded as interrupted (timeout); 0: no limit "
                         "(default 600)")
    sp.add_argument("--max-concurrent-runs", type=int, default=None, metavar="N",
                    help="agent runs at once per worker; more are refused with 503 (default 256)")
    sp.add_argument("--max-streams", type=int, default=None, metavar="N",
                    help="open event tails and resumed chat streams per worker; more are refused with 503 "
                         "(default 1000)")
    sp.add_argument("--max-streams-per-client", type=int, default=None, metavar="N",
                    help="the same, per client address; more are refused with 429 (default 100)")
    sp.add_argument("--request-timeout", type=float, default=None, metavar="SECONDS",
                    help="how long a client gets to send a request's headers, and then its body; 408 or the "
                         "connection closed after (default 30)")
    sp = add("copy", cmd_copy, "Copy every thread (events, links, metadata, tombstones) from one store to another, "
             "between any backends; resumable (run it again after an interruption); then compare every thread's "
             "export hash (exit 1 on a mismatch).", store=False)
    sp.add_argument("src", metavar="SRC", help="the source store: a directory, lmdb:///dir or postgresql://…")
    sp.add_argument("dest", metavar="DEST", help="the destination store (created if missing)")
    sp.add_argument("--chunk", type=int, default=None, metavar="N",
                    help="source events read per page and appended per transaction (default 256)")
    sp.add_argument("--no-verify", action="store_true", help="skip comparing the export hashes at the end")
    sp.add_argument("--check-rules", action="store_true",
                    help="apply the validation rules to the copied events (off: the source holds them already)")
    sp = add("migrate", cmd_migrate, "Create or upgrade the tplog schema of a PostgreSQL store to this version's.",
             store=False)
    sp.add_argument("url", metavar="URL", help="postgresql://… (?schema=NAME, default tplog)")
    sp = add("train", cmd_train, "Train a zstd dictionary on the store's events; new values use it. Trains nothing "
             "(\"trained\": false) below 64 events: zstd's trainer needs that many samples to find what recurs.")
    sp.add_argument("--samples", type=int, default=2000, help="how many recent events to sample (at least 64 train)")
    sp = add("rebuild", cmd_rebuild, "Rebuild projections from the log (safe while others append).")
    sp.add_argument("--projection", choices=["links", "state", "search"], default=None,
                    help="only this projection (search: the full-text index, tplog search)")
    sp.add_argument("--verify", action="store_true",
                    help="rebuild into a shadow copy and report every difference from the live projection; "
                         "exit 1 if any")
    sp.add_argument("--force", action="store_true",
                    help="take over the claim of another rebuild that still holds its lock (e.g. a stopped or stuck "
                         "process); that rebuild then stops without swapping anything in")
    sp.add_argument("--chunk", type=int, default=None, metavar="N",
                    help="events folded per read snapshot and per commit (default 20,000): smaller keeps "
                         "appends waiting less and memory lower, larger commits less often")
    sp = add("verify", cmd_verify, "Check every value, the indexes and the projections; exit 1 on any problem.")
    sp.add_argument("--no-projections", action="store_true", help="skip comparing projections with a rebuild")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    global _human
    _named.clear()
    try:
        args = build_parser().parse_args(argv)
        from tplog.console import is_terminal

        _human = args.command if not getattr(args, "json", True) and is_terminal(sys.stdout) else None
        code = int(args.fn(args))
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except TplogError as exc:
        msg = str(exc)
        for tid, name in _named.items():  # the id the user typed, beside the UUID it names
            msg = msg.replace(tid, f"{tid} ({name})")
        sys.stderr.write(f"error: {msg}\n")
        return 2
    except KeyboardInterrupt:  # Ctrl-C: the shell's convention (128 + SIGINT), no traceback
        sys.stderr.write("tplog: interrupted\n")
        return 130
    except BrokenPipeError:  # the reader closed the pipe (tplog tail | head -1): it wants no more, not an error
        _drop_stdout()
        return 0


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so what is still buffered for the closed pipe is dropped quietly
    when the interpreter flushes it at exit (else: "Exception ignored ... BrokenPipeError")."""
    with contextlib.suppress(OSError, ValueError):  # a stdout without a descriptor (in-process callers)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
