"""The LMDB backend's maintenance: deletion, rebuilds, tracking, locks, verify, backup, dictionary
training, stats (:class:`LmdbMaintenance`, a base of :class:`~tplog.backends.lmdb.recorder.LmdbRecorder`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from tplog.backends.common import check_deletable, check_no_forks, check_tombstone, decode_head, encode_head
from tplog.backends.contract import AppendResult, Handle, RebuildReport, Tracking, VerifyReport
from tplog.backends.lmdb import chunks, finder
from tplog.backends.lmdb import projections as proj
from tplog.backends.lmdb.commit import now_ns, resolved
from tplog.backends.lmdb.engine import Held, WriteTxn
from tplog.backends.lmdb.keys import TKEY_SIZE, eid_key, event_key, from_u64, scope_tag, tkey, u64
from tplog.backends.lmdb.reads import LmdbReads
from tplog.backends.lmdb.rebuild import CHUNK, rebuild
from tplog.codec import (
    F_BLOB,
    Encoded,
    blob_refcount,
    blob_with_refcount,
    stored_body,
)
from tplog.errors import (
    InvalidInputError,
    TplogError,
)
from tplog.events import KIND_CODE, LinkAdded, ThreadStarted

__all__ = ["LmdbMaintenance"]


class LmdbMaintenance(LmdbReads):
    """Deletion, rebuilds, tracking, locks, verify, backup, dictionary training and stats of
    :class:`~tplog.backends.lmdb.recorder.LmdbRecorder`."""

    logs: int

    # ------------------------------------------------------------------ delete

    def delete_thread(self, thread_id: str, tombstone: Encoded, *, scope: str | None = None) -> Handle[AppendResult]:
        return resolved(lambda: self._delete(thread_id, tombstone, scope))

    def _delete(self, thread_id: str, enc: Encoded, scope: str | None) -> AppendResult:
        check_tombstone(thread_id, enc)
        self._check_open()
        tk = tkey(thread_id, scope)
        tag = scope_tag(scope)

        def work(txn: WriteTxn) -> AppendResult:
            raw = txn.get("heads", tk)
            head = check_deletable(thread_id, None if raw is None else decode_head(raw))
            forks = []
            for ck, _ in txn.range("children", tk, tk + b"\xff" * 17):
                craw = txn.get("heads", bytes(ck[TKEY_SIZE:]))
                ch = decode_head(craw) if craw is not None else None
                if ch is not None and ch.fork_of is not None and ch.status == "active" and \
                        tkey(ch.fork_of, scope) == tk:
                    forks.append(ch.thread_id)
            check_no_forks(thread_id, forks)
            last = txn.last("global")
            pos = (from_u64(last[0]) if last else 0) + 1  # before removing any: positions are never reused
            tables = proj.Tables(txn, shadow=False)
            for seq, ev, spawned in proj.inherited_rows(txn, self.codec, tk):  # a fork's, from its parent's prefix
                proj.unapply_links(tables, thread_id, tk, seq, ev, spawned, scope)
            rows = chunks.EventRows(txn, self.codec)
            for k, v in list(rows.range(tk, tk + b"\xff" * 8, name=thread_id)):
                seq = from_u64(k, TKEY_SIZE)
                hdr = self.codec.header(v, where=(thread_id, seq))
                ref = txn.get("eventids", eid_key(hdr.event_id, scope))
                if ref is not None:
                    txn.delete("global", u64(from_u64(ref, TKEY_SIZE + 8)))
                    txn.delete("eventids", eid_key(hdr.event_id, scope))
                if hdr.kind == KIND_CODE[ThreadStarted]:
                    started = proj.started_event(self.codec, txn, k, v, (thread_id, seq))
                    if started is not None:
                        proj.unapply_links(tables, thread_id, tk, seq, started, (), scope)
                elif hdr.kind == KIND_CODE[LinkAdded] or (hdr.facts is not None and hdr.facts.spawned):
                    ev = None
                    if hdr.kind == KIND_CODE[LinkAdded]:
                        ev = self.codec.decode_event(self.codec.body_bytes(
                            v, txn, where=(thread_id, seq)))
                    proj.unapply_links(tables, thread_id, tk, seq, ev, hdr.facts.spawned if hdr.facts else (), scope)
                if v[1] & F_BLOB:  # release one reference to the shared blob
                    sha = bytes(stored_body(v))
                    blob = txn.get("blobs", sha)
                    if blob is not None:
                        n = blob_refcount(blob) - 1
                        if n <= 0:
                            txn.delete("blobs", sha)
                        else:
                            txn.put("blobs", sha, blob_with_refcount(blob, n))
            for k in rows.raw_keys(tk, tk + b"\xff" * 8):  # single rows and chunks
                txn.delete("events", k)
            txn.delete("proj", proj.STATE_PREFIX + tk)
            proj.drop_child_everywhere(txn, tk)
            seq = head.version + 1
            key = event_key(tk, seq)
            txn.put("events", key, enc.finish(key))
            txn.put("global", u64(pos), key)
            txn.put("eventids", eid_key(enc.event_id, scope), key + u64(pos))
            txn.delete("updated", tag + u64(head.updated_ns) + tk)
            now = now_ns()
            txn.put("updated", tag + u64(now) + tk, b"")
            new_head = msgspec.structs.replace(
                head, version=seq, last_position=pos, status="deleted", updated_ns=now,
                open_turn_agent=None, open_turn_seq=0, stored_bytes=0,
            )
            finder.reindex(txn, tag, head, new_head, tk)
            txn.put("heads", tk, encode_head(new_head))
            return AppendResult(thread_id=thread_id, first_seq=seq, last_seq=seq, first_position=pos,
                                last_position=pos, event_ids=[enc.event_id])

        res = self.engine.run_write(work)
        with self._position_cond:
            self._gc.last_position = max(self._gc.last_position, res.last_position)
            self._position_cond.notify_all()
        return res

    def rebuild(self, names: Sequence[str], *, verify: bool = False, force: bool = False,
                chunk: int = CHUNK, progress: Callable[[int, int], None] | None = None) -> list[RebuildReport]:
        for n in names:
            if n not in proj.PROJECTIONS:
                raise InvalidInputError(f"unknown projection {n!r}; known: {', '.join(proj.PROJECTIONS)}")
        self._check_open()
        return rebuild(self.engine, self.codec, list(names), verify=verify, progress=progress, force=force,
                       chunk=chunk)

    def tracking(self) -> list[Tracking]:
        with self.engine.read() as txn:
            end = txn.last("global")
            last = from_u64(end[0]) if end else 0
            out: list[Tracking] = []
            for name in proj.PROJECTIONS:
                info = proj.read_info(txn, name)
                live = proj.is_live(info, name)
                out.append(Tracking(name=name, version=info.version if info else None,
                                    code_version=proj.VERSIONS[name], status="live" if live else "stale",
                                    position=(last if live else (info.position if info else 0),)))
        return out

    def try_lock(self, name: str) -> Held | None:
        return self.engine.try_lock(name)

    def verify(self, *, projections: bool = True) -> VerifyReport:
        from tplog.backends.lmdb.verify import verify

        return verify(self, projections=projections)

    def backup(self, dest: str, *, compact: bool = True) -> None:
        """A consistent copy of the live store into the empty directory ``dest``."""
        self._check_open()
        self.engine.backup(dest, compact=compact)

    def sync(self) -> None:
        """Force everything committed so far to disk (useful in ``relaxed`` mode)."""
        self.engine.sync()

    def _start_trainer(self) -> None:
        """Train the store's first dictionary in the background (``auto_dictionary``);
        started once per store, whichever view's commit crosses the threshold."""
        gc = self._gc
        with gc.cond:
            if gc.trainer is not None or self._closed or self.readonly:
                return
            gc.trainer = threading.Thread(target=self._auto_train, name="tplog-dictionary", daemon=True)
        gc.trainer.start()

    def _auto_train(self) -> None:
        with contextlib.suppress(TplogError):  # closed meanwhile, disk full, ...: values stay as they are
            self.train_dictionary(samples=500, _first=True)

    def train_dictionary(self, *, samples: int = 2000, size: int = 64 << 10, _first: bool = False) -> int:
        """Train a zstd dictionary on up to ``samples`` stored event bodies; new values use it.

        Returns the new dictionary id (old values keep theirs). Returns 0 and
        trains nothing when there are too few samples.
        """
        bodies: list[bytes] = []
        with self.engine.read() as txn:
            rows = chunks.EventRows(txn, self.codec)
            for _pk, key in txn.range("global", b"", None, reverse=True):
                v = rows.get(key)
                if v is None:
                    continue
                b = self.codec.body_bytes(v, txn)
                if len(b) <= 64 << 10:
                    bodies.append(bytes(b))
                if len(bodies) >= samples:
                    break
        if len(bodies) < 64:
            return 0
        data = self.codec.train(bodies, size)

        def work(txn: WriteTxn) -> tuple[int, bytes]:
            last = txn.last("dicts")
            if _first and last is not None:  # another process trained one meanwhile: use it
                return from_u64(last[0]), bytes(last[1])
            new_id = (from_u64(last[0]) if last else 0) + 1
            txn.put("dicts", u64(new_id), data)
            return new_id, data

        new_id, stored = self.engine.run_write(work)
        self.codec.add_dictionary(new_id, stored)
        return new_id

    def stats(self) -> dict[str, Any]:
        """Counts and sizes: threads, events, bytes, map size, per-table entries."""
        info = self.engine.info()
        info["events"] = info["tables"]["global"]["entries"]  # one per event (``events`` rows may be chunks)
        info["threads"] = info["tables"]["heads"]["entries"]
        info["last_position"] = self.last_position
        info["dictionaries"] = info["tables"]["dicts"]["entries"]
        info["logs"] = self.logs
        gc = self._gc
        info["group_commit"] = {  # this process, since open
            "commits": gc.commits,
            "appends": gc.appends,
            "mean_group": round(gc.appends / gc.commits, 2) if gc.commits else 0.0,
        }
        return info
