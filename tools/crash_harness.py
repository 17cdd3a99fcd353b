"""Crash harness: SIGKILL writer (and backup) processes at random moments, then check the store.

Run it::

    python tools/crash_harness.py STORE --kills N [--seed S] [--writers W] [--threads T]
    python tools/crash_harness.py STORE --conversations --kills N   # Pydantic AI's store path

or import it (``tests/test_crash.py`` does) and call :func:`run`.

How it works
------------

Each *round* starts ``--writers`` writer processes (fresh interpreters) on the
store, and sometimes a backup process. A writer runs ``--threads`` Python
threads that append batches of 1-5 events (group commit, ``durable``) with
caller-chosen event ids to threads of their own (with integer expected
versions) and to a few shared threads (``expected_version="any"``), now and
then hard-delete a thread of their own. Every event is derived
deterministically from its id (:func:`derive_event`), so the harness knows the
exact content of every event without being told. Before an append a writer
writes a ``try`` line with the batch's ids to its stdout pipe, after it the
``ack`` line with the seqs and positions the store returned (one ``write()``
each, < PIPE_BUF, so a line arrives whole or not at all).

The harness SIGKILLs each process at a seeded random moment (some before the
process even opened the store), drains the pipes, then reopens the store and
checks (:func:`verify`):

- every acknowledged event is present, at the acknowledged seq and position,
  and byte-identical to what the writer sent (``to_builtins`` of the decoded
  event against the event derived from the id) — unless its thread was
  deleted, in which case it must be gone;
- no batch is partly visible (all of its ids or none, acknowledged or not),
  and a visible batch has contiguous seqs and positions;
- no event the writers never tried (phantoms);
- heads agree with the events: seqs ``1..version`` with no hole,
  ``last_position``, turn/message/link counts, the open turn, stored bytes,
  the ``updated`` index; a deleted thread keeps only its tombstone;
- the global log is strictly ordered, maps one-to-one onto the events and the
  ``eventids`` index, and its only gaps are the deleted threads' events;
- ``links_in``, ``children`` and the ``spawner`` rows equal a rebuild from the
  ``LinkAdded`` events and the spawn messages (a deleted thread is nobody's
  child); blob reference counts equal the references.

Backups: a backup process loops ``Store.backup`` into fresh directories and is
killed like the writers; the source store must stay intact (the full check),
every backup reported finished must open and pass the structural checks, and
hold only events identical to the source's. An unfinished backup directory is
allowed to be incomplete and is removed.

Stores rotate every ``--rounds-per-store`` rounds (``STORE/store-NNN``) so a
long soak does not re-check an ever-growing store; old ones are removed.
The tally (kills, acknowledged events checked, lost, torn, ...) is printed as
JSON; ``lost``, ``torn`` and ``problems`` must all be zero/empty.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

if __name__ == "__main__" and ("--writer" in sys.argv or "--backup-worker" in sys.argv):
    import faulthandler  # a hung round asks every live child for its Python stacks (SIGUSR1, to stderr)

    faulthandler.register(signal.SIGUSR1, all_threads=True)

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable from a checkout without installing
    sys.path.insert(0, str(ROOT))

from tplog import (  # noqa: E402
    AgentTurnCompleted,
    AgentTurnStarted,
    LinkAdded,
    MessageRecorded,
    Store,
    ThreadStarted,
    TplogError,
    UserTurnSubmitted,
)
from tplog.backends.lmdb.chunks import CHUNK_BYTES, EventRows  # noqa: E402
from tplog.backends.lmdb.keys import TKEY_SIZE, from_u64, tkey, u64  # noqa: E402
from tplog.codec import F_BLOB, Limits, stored_body  # noqa: E402
from tplog.events import ThreadDeleted  # noqa: E402
from tplog.protocol import (  # noqa: E402
    ResponseMessage,
    SystemMessage,
    TextPart,
    ThreadLink,
    UserPromptPart,
    UserTurn,
)
from tplog.protocol.json import to_builtins  # noqa: E402
from tplog.store import NO_STREAM, ThreadHead  # noqa: E402

# The on-disk layouts the checks read directly (tplog/FORMAT.md); kept here, not imported from
# tplog's internals, so that the harness checks the format rather than trusting the code under test.
C_LINK = 1  # children flag: the child has a spawned_from link to the parent
C_SPAWN = 2  # children flag: the parent recorded a thread_spawn event naming the child
SPAWNER = b"spawner\x00"  # proj rows: + child key + parent key, one per C_SPAWN children row
_head_dec = msgspec.msgpack.Decoder(ThreadHead)

try:  # tenant scopes: keys carry the scope (unscoped stores keep the plain layout)
    from tplog.backends.lmdb.keys import eid_key, scope_tag
except ImportError:  # pragma: no cover - before scopes
    def eid_key(event_id: str, scope: str | None) -> bytes:
        return event_id.encode()

    def scope_tag(scope: str | None) -> bytes:
        return b""


def _tkey(thread_id: str, scope: str | None) -> bytes:
    return tkey(thread_id, scope) if scope is not None else tkey(thread_id)
_ids_dec = msgspec.msgpack.Decoder(list[str])
_child_dec = msgspec.msgpack.Decoder(tuple[str, int])

T = "2025-01-20T10:00:00Z"
SHARED = ("shared-0", "shared-1", "shared-2")
RELATIONS = ("spawned_from", "referenced", "reply_to")
WRITER_LIMITS = Limits(blob_threshold=2048)  # small, so blobs (and shared blobs) are common
SEP = "~"
ROUND_DEADLINE = 60.0  # seconds; a round normally takes 1-3 s
NS = uuid.UUID("6f1c3f1e-8a43-4d0e-9c55-6f0f00c0ffee")

# --------------------------------------------------------------------------- events from ids


def event_id(tid: str, n: int | str, code: str, arg: str = "") -> str:
    return SEP.join((tid, str(n), code, arg))


def _text(eid: str, size: int) -> str:
    h = hashlib.sha256(eid.encode()).hexdigest()
    return (h * (size // len(h) + 1))[:size]


def derive_event(eid: str) -> Any:
    """The event a writer sends under id ``eid`` (``thread~n~code~arg``)."""
    tid, _n, code, arg = eid.split(SEP, 3)
    if code == "S":
        return ThreadStarted(thread_id=tid, created_at=T, title=f"title {tid}")
    if code == "U":  # small: stored uncompressed
        return UserTurnSubmitted(turn=UserTurn(submitted_at=T, parts=[UserPromptPart(content=_text(eid, 24))]))
    if code == "Z":  # medium: zstd-compressed
        return UserTurnSubmitted(turn=UserTurn(submitted_at=T, parts=[UserPromptPart(content=_text(eid, 900))]))
    if code == "B":  # large and shared between events: a refcounted blob
        return UserTurnSubmitted(turn=UserTurn(submitted_at=T, parts=[UserPromptPart(content=f"blob {arg} " * 900)]))
    if code == "A":
        return AgentTurnStarted(agent_id="a1", started_at=T)
    if code == "R":
        return MessageRecorded(message=ResponseMessage(timestamp=T, agent_id="a1",
                                                       parts=[TextPart(content=_text(eid, 40 + len(eid) * 3))]))
    if code == "P":
        return MessageRecorded(message=SystemMessage(timestamp=T, event_type="data-tp-thread_spawn",
                                                     event_data={"spawned_thread_id": arg}, source_agent="a1"))
    if code == "C":
        return AgentTurnCompleted(completed_at=T)
    if code == "L":
        rel, target = arg.split("^", 1)
        return LinkAdded(link=ThreadLink(thread_id=target, relation=rel), at=T)
    raise ValueError(f"unknown event code in {eid!r}")


# --------------------------------------------------------------------------- writer process


class _Own:
    def __init__(self, tid: str) -> None:
        self.tid = tid
        self.version = 0
        self.open = False
        self.n = 0


def _emit_factory() -> Any:
    lock = threading.Lock()

    def emit(obj: dict[str, Any]) -> None:
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        assert len(data) < 4096, "one line must fit PIPE_BUF to arrive whole"
        with lock:
            os.write(1, data)

    return emit


def writer_main(path: str, wid: str, seed: int, nthreads: int, seconds: float, delete_rate: float = 0.03,
                map_size: int = 256 << 10) -> None:
    rng = random.Random(seed)
    emit = _emit_factory()
    store = Store(path, durability="durable", limits=WRITER_LIMITS, map_size=map_size,
                  check_rules=False)  # toy ids and agents: storage mechanics, not protocol rules
    emit({"op": "ready", "pid": os.getpid()})
    deadline = time.monotonic() + seconds
    counter = iter(range(10**9))
    counter_lock = threading.Lock()

    def new_own() -> _Own:
        with counter_lock:
            k = next(counter)
        name = f"{wid}-{k}"
        return _Own(str(uuid.uuid5(NS, name)) if rng.random() < 0.3 else name)

    def pool(r: random.Random, own: _Own) -> str:
        return r.choice([*SHARED, own.tid, f"{wid}-{r.randrange(8)}", f"ext-{r.randrange(4)}"])

    def work(k: int, r: random.Random) -> None:
        own = new_own()
        shared_n = 0
        try:
            while time.monotonic() < deadline:
                x = r.random()
                if x < delete_rate and own.version > 0:
                    emit({"op": "trydel", "t": own.tid})
                    res = store.delete_thread(own.tid, reason="harness")
                    emit({"op": "ackdel", "t": own.tid, "pos": res.last_position})
                    own = new_own()
                    continue
                if x < 0.2:
                    tid = r.choice(SHARED)
                    ids = []
                    for _ in range(r.randint(1, 3)):
                        shared_n += 1
                        if r.random() < 0.7:
                            ids.append(event_id(tid, f"{wid}.{k}.{shared_n}", "U"))
                        else:
                            ids.append(event_id(tid, f"{wid}.{k}.{shared_n}", "L",
                                                f"{r.choice(RELATIONS)}^{pool(r, own)}"))
                    expected: Any = "any"
                else:
                    tid = own.tid
                    ids = []
                    version, is_open = own.version, own.open
                    for _ in range(r.randint(1, 5)):
                        own.n += 1
                        n = own.n
                        if version == 0 and not ids:
                            code, arg = "S", ""
                        elif not is_open:
                            code = r.choices("UZBAL", weights=(30, 15, 8, 30, 17))[0]
                            arg = ""
                            if code == "A":
                                is_open = True
                            elif code == "B":
                                arg = str(r.randrange(3))
                            elif code == "L":
                                arg = f"{r.choice(RELATIONS)}^{pool(r, own)}"
                        else:
                            code = r.choices("RPLC", weights=(40, 10, 10, 40))[0]
                            arg = ""
                            if code == "C":
                                is_open = False
                            elif code == "P":
                                arg = pool(r, own)
                            elif code == "L":
                                arg = f"{r.choice(RELATIONS)}^{pool(r, own)}"
                        ids.append(event_id(tid, n, code, arg))
                    expected = own.version if own.version > 0 else NO_STREAM
                emit({"op": "try", "t": tid, "ids": ids})
                res = store.append(tid, [derive_event(e) for e in ids], expected_version=expected, event_ids=ids)
                emit({"op": "ack", "t": tid, "ids": ids, "fs": res.first_seq, "ls": res.last_seq,
                      "fp": res.first_position, "lp": res.last_position})
                if tid == own.tid:
                    own.version, own.open = res.last_seq, is_open
        except BaseException:
            emit({"op": "err", "msg": traceback.format_exc()[-3000:]})
            os._exit(3)

    threads = [threading.Thread(target=work, args=(k, random.Random(rng.random())), daemon=True)
               for k in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    emit({"op": "done"})


def backup_main(path: str, destroot: str, seed: int) -> None:
    rng = random.Random(seed)
    emit = _emit_factory()
    store = Store(path)
    emit({"op": "ready", "pid": os.getpid()})
    for i in range(10**6):
        dest = os.path.join(destroot, f"b{i}")
        emit({"op": "bstart", "dest": dest})
        store.backup(dest, compact=rng.random() < 0.5)
        emit({"op": "bdone", "dest": dest})


# --------------------------------------------------------------------------- the ledger


@dataclass
class Ledger:
    """What the writers tried and what the store acknowledged."""

    batches: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)  # ids -> {"t", "ack"}
    deletes: dict[str, bool] = field(default_factory=dict)  # thread id -> acknowledged
    ack_lines: int = 0
    positions: dict[int, str] = field(default_factory=dict)  # acknowledged position -> what got it
    reused: list[str] = field(default_factory=list)

    def _position(self, pos: int, what: str) -> None:
        old = self.positions.get(pos)
        if old is not None:
            self.reused.append(f"position {pos} acknowledged twice: to {old} and to {what}")
        self.positions[pos] = what

    def feed(self, msg: dict[str, Any]) -> None:
        op = msg["op"]
        if op == "try":
            self.batches.setdefault(tuple(msg["ids"]), {"t": msg["t"], "ack": None})
        elif op == "ack":
            self.batches[tuple(msg["ids"])]["ack"] = msg
            self.ack_lines += 1
            for i, pos in zip(msg["ids"], range(msg["fp"], msg["lp"] + 1), strict=False):
                self._position(pos, i)
        elif op == "trydel":
            self.deletes.setdefault(msg["t"], False)
        elif op == "ackdel":
            self.deletes[msg["t"]] = True
            self._position(msg["pos"], f"the tombstone of {msg['t']}")


@dataclass
class Tally:
    kills: int = 0
    kills_before_ready: int = 0
    kills_during_backup: int = 0
    backups_checked: int = 0
    rounds: int = 0
    stores: int = 0
    verifies: int = 0
    acked_batches: int = 0
    acked_events_checked: int = 0
    acked_events_deleted: int = 0
    unacked_batches_visible: int = 0
    unacked_batches_absent: int = 0
    deletes_acked: int = 0
    events_in_store: int = 0
    lost: int = 0
    torn: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["problems"] = list(self.problems[:20])
        d["problem_count"] = len(self.problems)
        return d


# --------------------------------------------------------------------------- checks


def _fold_head(evs: list[Any]) -> dict[str, Any]:
    c: dict[str, Any] = {"user_turns": 0, "agent_turns": 0, "messages": 0, "links": 0, "open_turn_agent": None,
                         "open_turn_seq": 0}
    for seq, ev in evs:
        if isinstance(ev, UserTurnSubmitted):
            c["user_turns"] += 1
        elif isinstance(ev, AgentTurnStarted):
            c["agent_turns"] += 1
            c["open_turn_agent"], c["open_turn_seq"] = ev.agent_id, seq
        elif isinstance(ev, MessageRecorded):
            c["messages"] += 1
        elif isinstance(ev, LinkAdded):
            c["links"] += 1
        elif isinstance(ev, AgentTurnCompleted):
            c["open_turn_agent"], c["open_turn_seq"] = None, 0
    return c


def check_structure(store: Store) -> tuple[list[str], dict[str, Any]]:
    """Every internal invariant of the store's tables; returns (problems, facts).

    ``facts`` holds ``events`` (event id -> RecordedEvent), ``heads`` (thread
    id -> ThreadHead) and ``values`` (event id -> raw stored value).
    """
    problems: list[str] = []
    bad = problems.append
    with store.backend.engine.read() as txn:
        heads = {bytes(k): _head_dec.decode(v) for k, v in txn.range("heads")}
        values = {bytes(k): bytes(v) for k, v in EventRows(txn, store.codec).range()}  # chunk rows expanded
        row_bytes: Counter[bytes] = Counter()
        chunked: set[bytes] = set()
        for k, v in txn.range("events"):
            row_bytes[bytes(k[:TKEY_SIZE])] += len(v)
            if v[:1] in CHUNK_BYTES:
                chunked.add(bytes(k[:TKEY_SIZE]))
        glob = [(from_u64(k), bytes(v)) for k, v in txn.range("global")]
        eids = {bytes(k): bytes(v) for k, v in txn.range("eventids")}
        links_in = {bytes(k): _ids_dec.decode(v) for k, v in txn.range("links_in")}
        children = {bytes(k): _child_dec.decode(v) for k, v in txn.range("children")}
        spawners = {bytes(k) for k, _ in txn.range("proj", SPAWNER, SPAWNER[:-1] + b"\x01")}
        updated = {bytes(k) for k, _ in txn.range("updated")}
        blobs = {bytes(k): bytes(v) for k, v in txn.range("blobs")}

        # the global log: strictly increasing, one entry per event
        key_pos: dict[bytes, int] = {}
        prev = 0
        for p, k in glob:
            if p <= prev:
                bad(f"global log not strictly increasing at {p}")
            prev = p
            if k in key_pos:
                bad(f"global positions {key_pos[k]} and {p} name the same event")
            key_pos[k] = p
            if k not in values:
                bad(f"global position {p} names a missing event {k.hex()}")
        for k in values:
            if k not in key_pos:
                bad(f"event {k.hex()} has no global position")
        last = glob[-1][0] if glob else 0
        gaps = last - len(glob)

        # decode every event; the eventids index must match it one-to-one
        by_thread: dict[bytes, list[tuple[int, Any, bytes]]] = {}
        recs: dict[str, Any] = {}
        raw_by_id: dict[str, bytes] = {}
        for k, v in values.items():
            tk, seq = k[:TKEY_SIZE], from_u64(k, TKEY_SIZE)
            h = heads.get(tk)
            if h is None:
                bad(f"event {k.hex()} belongs to no thread head")
                continue
            try:
                r = store.backend._decode_value(txn, k, v, h.thread_id, seq, key_pos.get(k, 0), h.scope)
            except TplogError as exc:
                bad(f"event {h.thread_id}/{seq} does not decode: {exc!r}")
                continue
            if r.event_id in recs:
                bad(f"event id {r.event_id} stored twice")
            recs[r.event_id] = r
            raw_by_id[r.event_id] = v
            ref = eids.get(eid_key(r.event_id, getattr(h, "scope", None)))
            if ref != k + u64(key_pos.get(k, 0)):
                bad(f"eventids[{r.event_id}] = {ref!r} does not point at {h.thread_id}/{seq}")
            by_thread.setdefault(tk, []).append((seq, r, v))
        if len(eids) != len(values):
            bad(f"{len(eids)} eventids entries for {len(values)} events")

        # heads against their events
        deleted_events = 0
        links_rebuilt: dict[bytes, list[str]] = {}
        children_rebuilt: dict[bytes, tuple[str, int]] = {}
        blob_refs: Counter[bytes] = Counter()
        for tk, h in heads.items():
            scope = getattr(h, "scope", None)
            if _tkey(h.thread_id, scope) != tk:
                bad(f"head {h.thread_id} stored under the wrong key")
            evs = sorted(by_thread.get(tk, []), key=lambda x: x[0])
            seqs = [s for s, _, _ in evs]
            if scope_tag(scope) + u64(h.updated_ns) + tk not in updated:
                bad(f"head {h.thread_id}: no 'updated' entry for {h.updated_ns}")
            if h.status == "deleted":
                deleted_events += h.version - 1
                if seqs != [h.version] or not isinstance(evs[0][1].event, ThreadDeleted):
                    bad(f"deleted thread {h.thread_id}: events {seqs}, expected only its tombstone {h.version}")
                if h.stored_bytes != 0 or h.open_turn_agent is not None:
                    bad(f"deleted thread {h.thread_id}: head not reset ({h})")
            elif h.status == "active":
                if seqs != list(range(1, h.version + 1)):
                    bad(f"thread {h.thread_id}: seqs {seqs[:5]}..{seqs[-5:]} but version {h.version}")
                if not evs or not isinstance(evs[0][1].event, ThreadStarted) \
                        or evs[0][1].event.thread_id != h.thread_id:
                    bad(f"thread {h.thread_id}: first event is not its ThreadStarted")
                want = _fold_head([(s, r.event) for s, r, _ in evs])
                got = {f: getattr(h, f) for f in want}
                if got != want:
                    bad(f"thread {h.thread_id}: head counts {got} but events say {want}")
                # stored_bytes counts the values as appended; a chunk row is kept only when smaller
                rows = row_bytes.get(tk, 0)
                if not (rows < h.stored_bytes if tk in chunked else rows == h.stored_bytes):
                    bad(f"thread {h.thread_id}: stored_bytes {h.stored_bytes}, its rows {rows} "
                        f"({'chunked' if tk in chunked else 'no chunk'})")
                for s, r, _v in evs:
                    ev = r.event
                    if isinstance(ev, LinkAdded):
                        key = _tkey(ev.link.thread_id, scope) + ev.link.relation.encode() + b"\x00" + tk + u64(s)
                        links_rebuilt[key] = [h.thread_id, ev.link.thread_id]
                        if ev.link.relation == "spawned_from":
                            ck = _tkey(ev.link.thread_id, scope) + tk
                            old = children_rebuilt.get(ck, (h.thread_id, 0))
                            children_rebuilt[ck] = (h.thread_id, old[1] | C_LINK)
                    elif isinstance(ev, MessageRecorded) and isinstance(ev.message, SystemMessage) \
                            and ev.message.event_type == "data-tp-thread_spawn":
                        child = ev.message.event_data["spawned_thread_id"]
                        ck = tk + _tkey(child, scope)
                        old = children_rebuilt.get(ck, (child, 0))
                        children_rebuilt[ck] = (child, old[1] | C_SPAWN)
            else:
                bad(f"thread {h.thread_id}: unknown status {h.status!r}")
            if evs and h.last_position != key_pos.get(tk + u64(evs[-1][0]), -1):
                bad(f"thread {h.thread_id}: last_position {h.last_position} is not its last event's")
            if evs and evs[-1][0] != h.version:
                bad(f"thread {h.thread_id}: version {h.version} but last seq {evs[-1][0]}")
            for _, _, v in evs:
                if v[1] & F_BLOB:
                    blob_refs[bytes(stored_body(v))] += 1
        if gaps != deleted_events:
            bad(f"global log has {gaps} gaps but deleted threads account for {deleted_events}")
        if len(updated) != len(heads):
            bad(f"{len(updated)} 'updated' entries for {len(heads)} heads")
        if links_in != links_rebuilt:
            extra = set(links_in) - set(links_rebuilt)
            missing = set(links_rebuilt) - set(links_in)
            bad(f"links_in differs from a rebuild: {len(extra)} extra, {len(missing)} missing, "
                f"{sum(links_in[k] != links_rebuilt[k] for k in set(links_in) & set(links_rebuilt))} changed")
        # A deleted thread is nobody's child; each spawn-event row has its ``spawner`` row.
        gone = {tk for tk, h in heads.items() if h.status == "deleted"}
        children_rebuilt = {k: v for k, v in children_rebuilt.items() if k[TKEY_SIZE:] not in gone}
        spawner_rebuilt = {SPAWNER + k[TKEY_SIZE:] + k[:TKEY_SIZE] for k, (_, f) in children_rebuilt.items()
                           if f & C_SPAWN}
        if spawners != spawner_rebuilt:
            bad(f"spawner rows differ from a rebuild: {len(spawners)} stored, {len(spawner_rebuilt)} rebuilt")
        if children != children_rebuilt:
            bad(f"children differs from a rebuild: {len(children)} stored, {len(children_rebuilt)} rebuilt; "
                f"first diff {next(iter(set(children.items()) ^ set(children_rebuilt.items())), None)}")
        for sha, blob in blobs.items():
            if int.from_bytes(blob[:4], "big") != blob_refs.get(sha, 0):
                bad(f"blob {sha.hex()[:12]}: refcount {int.from_bytes(blob[:4], 'big')}, "
                    f"{blob_refs.get(sha, 0)} references")
        for sha in blob_refs:
            if sha not in blobs:
                bad(f"blob {sha.hex()[:12]} referenced but missing")
        if last and store.last_position != last:
            bad(f"last_position {store.last_position} != last global entry {last}")
    return problems, {"events": recs, "heads": {h.thread_id: h for h in heads.values()}, "values": raw_by_id}


def verify(path: str, ledger: Ledger, tally: Tally) -> tuple[list[str], dict[str, Any]]:
    """Reopen the store after the kills and check it against the ledger. Adds to ``tally``."""
    store = Store(path)
    try:
        problems, facts = check_structure(store)
    finally:
        store.close()
    bad = problems.append
    recs, heads = facts["events"], facts["heads"]
    tally.verifies += 1
    tally.events_in_store = len(recs)
    tried: set[str] = set()
    for ids, b in ledger.batches.items():
        tried.update(ids)
        tid, ack = b["t"], b["ack"]
        h = heads.get(tid)
        deleted = h is not None and h.status == "deleted"
        present = [recs[i] for i in ids if i in recs]
        if deleted:
            if present:
                bad(f"deleted thread {tid} still holds events {[r.event_id for r in present]}")
            if ack is not None and not b.get("counted"):
                b["counted"] = True
                tally.acked_batches += 1
                tally.acked_events_deleted += len(ids)
            continue
        if present and len(present) != len(ids):
            tally.torn += 1
            bad(f"torn batch in {tid}: {len(present)} of {len(ids)} events visible: {ids}")
        for r in present:
            if r.thread_id != tid:
                bad(f"event {r.event_id} in thread {r.thread_id}, sent to {tid}")
            if to_builtins(r.event) != to_builtins(derive_event(r.event_id)):
                bad(f"event {r.event_id} differs from what was sent")
        if len(present) == len(ids):
            seqs = [r.seq for r in present]
            pos = [r.position for r in present]
            if seqs != list(range(seqs[0], seqs[0] + len(ids))) or pos != list(range(pos[0], pos[0] + len(ids))):
                bad(f"batch {ids} not contiguous: seqs {seqs} positions {pos}")
        if ack is not None:
            first = not b.get("counted")
            b["counted"] = True
            tally.acked_batches += first
            if len(present) != len(ids):
                tally.lost += len(ids) - len(present)
                bad(f"acknowledged batch lost in {tid}: {len(ids) - len(present)} of {len(ids)} missing")
            else:
                want = (ack["fs"], ack["ls"], ack["fp"], ack["lp"])
                got = (present[0].seq, present[-1].seq, present[0].position, present[-1].position)
                if want != got:
                    bad(f"acknowledged batch {ids} at seqs/positions {got}, acknowledged {want}")
                elif first:
                    tally.acked_events_checked += len(ids)
        elif not b.get("counted"):
            b["counted"] = True  # an unacknowledged batch is decided once its writer is dead
            if present:
                tally.unacked_batches_visible += 1
            else:
                tally.unacked_batches_absent += 1
    for eid, r in recs.items():
        if eid not in tried and not isinstance(r.event, ThreadDeleted):
            bad(f"phantom event {eid} in {r.thread_id}: no writer tried it")
    problems.extend(ledger.reused[:5])  # a catch-up reader at P would miss what was put at P again
    for tid, acked in ledger.deletes.items():
        h = heads.get(tid)
        if acked:
            tally.deletes_acked += 1
            if h is None or h.status != "deleted":
                tally.lost += 1
                bad(f"acknowledged delete of {tid} not visible")
    return problems, facts


def check_backup(dest: str, src: dict[str, Any]) -> list[str]:
    """A finished backup opens read-only, is internally consistent, and agrees with the source
    (``src``: the source's facts from :func:`check_structure`, taken after the backup)."""
    with Store(dest, readonly=True) as b:
        problems, facts = check_structure(b)
    for eid, v in facts["values"].items():
        r = facts["events"][eid]
        h = src["heads"].get(r.thread_id)
        if h is not None and h.status == "deleted":
            continue
        # a turn closed after the backup re-stores the source's rows as a chunk (its values then
        # differ in bytes, not in content): compare the decoded events when the bytes differ
        if src["values"].get(eid) != v and src["events"].get(eid) != r:
            problems.append(f"backup {dest}: event {eid} differs from the source")
    return problems


# --------------------------------------------------------------------------- the driver


def _spawn(args: list[str]) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)


@dataclass
class _Proc:
    p: subprocess.Popen[bytes]
    kind: str
    kill_at: float | None
    after_ready: float | None
    buf: bytes = b""
    ready: bool = False
    killed: bool = False
    eof: bool = False
    last_op: str = ""
    dests: list[tuple[str, bool]] = field(default_factory=list)


def _proc_state(pid: int) -> str:
    """The kernel's view of a process: state (R, S, D, Z) and what it waits in."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        state = stat[stat.rindex(")") + 2:].split()[0]
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip() or "-"
        return f"state {state}, wchan {wchan}"
    except OSError as exc:
        return f"no /proc entry ({exc.strerror})"


def _hang_report(procs: list[_Proc]) -> str:
    """Why a round did not end: each child still holding its pipe open, with its Python stacks
    (children dump them on SIGUSR1) and stderr. Kills them all."""
    live = [pr for pr in procs if not pr.eof]
    for pr in live:
        if pr.p.poll() is None and not pr.killed:
            os.kill(pr.p.pid, signal.SIGUSR1)
    time.sleep(2.0)
    lines = []
    for pr in live:
        lines.append(f"- {pr.kind} pid {pr.p.pid}: ready={pr.ready} killed={pr.killed} last_op={pr.last_op!r} "
                     f"kill_at={pr.kill_at} returncode={pr.p.poll()} {_proc_state(pr.p.pid)}")
    for pr in procs:
        if pr.p.poll() is None:
            pr.p.kill()
    for pr in live:
        pr.p.wait()
        err = pr.p.stderr.read().decode(errors="replace") if pr.p.stderr else ""
        lines.append(f"stderr of pid {pr.p.pid}:\n{err[-6000:]}")
    return "\n".join(lines)


def _setup(path: str, ledger: Ledger) -> None:
    with Store(path, durability="durable", map_size=256 << 10, check_rules=False) as s:  # toy ids, as the writers
        for tid in SHARED:
            ids = [event_id(tid, 0, "S")]
            ledger.feed({"op": "try", "t": tid, "ids": ids})
            r = s.append(tid, [derive_event(ids[0])], expected_version=NO_STREAM, event_ids=ids)
            ledger.feed({"op": "ack", "t": tid, "ids": ids, "fs": r.first_seq, "ls": r.last_seq,
                         "fp": r.first_position, "lp": r.last_position})


def _round(path: str, rnd: int, rng: random.Random, ledger: Ledger, tally: Tally, *, writers: int,
           threads: int, backup: bool, max_wait: float, delete_rate: float, map_size: int) -> None:
    procs: list[_Proc] = []
    start = time.monotonic()
    for i in range(writers):
        p = _spawn(["--writer", path, "--wid", f"r{rnd}w{i}", "--seed", str(rng.randrange(2**32)),
                    "--threads", str(threads), "--delete-rate", str(delete_rate), "--map-size", str(map_size)])
        if rng.random() < 0.08:  # kill during start-up / open
            procs.append(_Proc(p, "writer", start + rng.uniform(0.0, 0.3), None))
        else:
            procs.append(_Proc(p, "writer", None, rng.uniform(0.01, max_wait)))
    destroot = path + f".backups-{rnd}"
    if backup:
        os.makedirs(destroot, exist_ok=True)
        p = _spawn(["--backup-worker", path, "--dest", destroot, "--seed", str(rng.randrange(2**32))])
        procs.append(_Proc(p, "backup", None, rng.uniform(0.01, max_wait)))
    sel = selectors.DefaultSelector()
    for pr in procs:
        assert pr.p.stdout is not None
        os.set_blocking(pr.p.stdout.fileno(), False)
        sel.register(pr.p.stdout, selectors.EVENT_READ, pr)
    hard_deadline = start + ROUND_DEADLINE
    try:
        while any(not pr.eof for pr in procs):
            now = time.monotonic()
            if now > hard_deadline:
                raise RuntimeError(f"crash harness round {rnd} hung ({path}):\n" + _hang_report(procs))
            for pr in procs:
                if not pr.killed and pr.kill_at is not None and now >= pr.kill_at:
                    if pr.p.poll() is None:
                        os.kill(pr.p.pid, signal.SIGKILL)
                        pr.killed = True
                        tally.kills += 1
                        tally.kills_before_ready += not pr.ready
                        tally.kills_during_backup += pr.last_op == "bstart"
                    else:
                        pr.killed = True  # exited by itself: reported below
            pending = [pr.kill_at for pr in procs if not pr.killed and pr.kill_at is not None]
            timeout = max(0.0, min(pending) - now) if pending else 0.5
            for key, _ in sel.select(timeout):
                pr = key.data
                try:
                    chunk = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                if not chunk:
                    pr.eof = True
                    sel.unregister(key.fileobj)
                    continue
                pr.buf += chunk
                *lines, pr.buf = pr.buf.split(b"\n")
                for line in lines:
                    msg = json.loads(line)
                    op = msg["op"]
                    pr.last_op = op
                    if op == "ready":
                        pr.ready = True
                        if pr.kill_at is None:
                            pr.kill_at = time.monotonic() + (pr.after_ready or 0.0)
                    elif op == "err":
                        tally.problems.append(f"writer failed: {msg['msg']}")
                    elif op == "bstart":
                        pr.dests.append((msg["dest"], False))
                    elif op == "bdone":
                        pr.dests[-1] = (msg["dest"], True)
                    else:
                        ledger.feed(msg)
            # a partial last line (the process died mid-write) is ignored: writes are < PIPE_BUF, so never
    finally:
        for pr in procs:
            if pr.p.poll() is None:
                pr.p.kill()
            pr.p.wait()
            err = pr.p.stderr.read().decode(errors="replace") if pr.p.stderr else ""
            if pr.p.returncode != -signal.SIGKILL:
                tally.problems.append(f"{pr.kind} exited with {pr.p.returncode} instead of being killed: "
                                      f"{err[-2000:]}")
            if pr.p.stdout:
                pr.p.stdout.close()
            if pr.p.stderr:
                pr.p.stderr.close()
        sel.close()
    problems, facts = verify(path, ledger, tally)
    tally.problems.extend(problems)
    for pr in procs:
        for dest, _done in [d for d in pr.dests if d[1]][-2:]:  # the last finished ones (each takes a while)
            tally.backups_checked += 1
            tally.problems.extend(check_backup(dest, facts))
    shutil.rmtree(destroot, ignore_errors=True)
    tally.rounds += 1


def run(base: str, kills: int, *, seed: int | None = None, writers: int = 2, threads: int = 4,
        rounds_per_store: int = 12, backup_every: int = 4, max_wait: float = 0.5,
        max_seconds: float | None = None, keep: bool = False, delete_rate: float = 0.03,
        map_size: int = 256 << 10, log: Any = None) -> Tally:
    """Kill at least ``kills`` processes (or stop after ``max_seconds``); return the tally."""
    if seed is None:
        seed = random.randrange(2**32)
    if log is not None:
        log(f"crash harness seed {seed}")
    rng = random.Random(seed)
    tally = Tally()
    os.makedirs(base, exist_ok=True)
    t0 = time.monotonic()
    rnd = 0
    path = ""
    ledger = Ledger()
    while tally.kills < kills and (max_seconds is None or time.monotonic() - t0 < max_seconds):
        if rnd % rounds_per_store == 0:
            if path and not keep:
                shutil.rmtree(path, ignore_errors=True)
            path = os.path.join(base, f"store-{tally.stores:03d}")
            tally.stores += 1
            ledger = Ledger()
            _setup(path, ledger)
        _round(path, rnd, rng, ledger, tally, writers=writers, threads=threads,
               backup=backup_every > 0 and rnd % backup_every == backup_every - 1, max_wait=max_wait,
               delete_rate=delete_rate, map_size=map_size)
        rnd += 1
        if tally.problems:
            break
        if log is not None and rnd % 25 == 0:
            log(f"  round {rnd}: {tally.kills} kills, {tally.acked_events_checked} acked events checked")
    return tally


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("store", metavar="STORE", help="a directory for the stores (STORE/store-NNN)")
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--writers", type=int, default=2, help="writer processes per round")
    ap.add_argument("--threads", type=int, default=4, help="threads per writer")
    ap.add_argument("--rounds-per-store", type=int, default=12)
    ap.add_argument("--backup-every", type=int, default=4, help="a backup process every N rounds (0: never)")
    ap.add_argument("--max-wait", type=float, default=0.5, help="longest a process lives after it is ready")
    ap.add_argument("--keep", action="store_true", help="keep the checked stores")
    ap.add_argument("--map-size", type=int, default=256 << 10,
                    help="writers' initial LMDB map (small, so the map grows under the kills)")
    ap.add_argument("--delete-rate", type=float, default=0.03, help="share of writer operations that delete a thread")
    ap.add_argument("--conversations", action="store_true",
                    help="kill processes saving through Pydantic AI's ConversationStore (tools/crash_conversations.py)")
    # internal: the child processes
    ap.add_argument("--writer", metavar="PATH", help=argparse.SUPPRESS)
    ap.add_argument("--backup-worker", metavar="PATH", help=argparse.SUPPRESS)
    ap.add_argument("--wid", help=argparse.SUPPRESS)
    ap.add_argument("--dest", help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=60.0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.writer:
        writer_main(a.writer, a.wid, a.seed, a.threads, a.seconds, a.delete_rate, a.map_size)
        return 0
    if a.backup_worker:
        backup_main(a.backup_worker, a.dest, a.seed)
        return 0
    if a.conversations:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import crash_conversations

        seed_args = [] if a.seed is None else ["--seed", str(a.seed)]
        return crash_conversations.main([a.store, "--kills", str(a.kills), "--workers", str(a.writers), *seed_args])
    seed = a.seed if a.seed is not None else random.randrange(2**32)
    print(f"seed {seed}", flush=True)
    tally = run(a.store, a.kills, seed=seed, writers=a.writers, threads=a.threads,
                rounds_per_store=a.rounds_per_store, backup_every=a.backup_every, max_wait=a.max_wait,
                keep=a.keep, delete_rate=a.delete_rate, map_size=a.map_size,
                log=lambda s: print(s, file=sys.stderr, flush=True))
    print(json.dumps(tally.as_dict(), indent=2))
    ok = not tally.problems and tally.lost == 0 and tally.torn == 0
    print("OK" if ok else "FAILED", f"(seed {seed})")
    return 0 if ok else 1


if __name__ == "__main__":
    # The "store" positional is required for the driver only; children pass their own flags.
    if "--writer" in sys.argv or "--backup-worker" in sys.argv:
        sys.argv.insert(1, "-")
    raise SystemExit(main())
