"""Power-loss harness: stores written through tools/powerloss_fs.py, then the power is cut.

Run it::

    python tools/powerloss_harness.py WORKDIR --cuts N [--seed S] [--mode harsh|flushed]
    python tools/powerloss_harness.py WORKDIR --boundaries [--seed S]

or import it (``tests/test_powerloss.py`` does) and call :func:`run_random`
and :func:`run_boundaries`.

Unlike the SIGKILL harness (tools/crash_harness.py), whose victims leave the
OS page cache behind, this one loses what the page cache held: each round
mounts the FUSE file system of tools/powerloss_fs.py over a backing directory,
starts worker processes that append (durable, relaxed or pipelined — ``Store.pipeline``, acknowledged
at each ``commit()`` — several threads each,
so appends form group commits), delete threads, back up, train dictionaries,
rebuild projections and ``sync``, on a small map that must grow, and then
cuts the power: the file system freezes (every later write, flush or metadata change fails), the
workers are SIGKILLed, and the backing files are rewritten to what a disk
would hold — only the flushed writes (``flushed``), or besides a random part of
the unflushed ones, reordered and with torn pages (``harsh``). Random rounds
cut at a random moment; :func:`run_boundaries` cuts a short deterministic run
before every data operation in turn (each write and each flush: between the
data flush and the meta page of every LMDB commit included).

Workers print one JSON line per step (one ``write()``, so a line arrives whole
or not at all): ``try`` before an append (its ids), ``ack`` after (its seqs and
last position), ``del_try``/``del_ack`` around a delete, ``sync_try``/``sync_ack``
around ``Store.sync``, ``backup`` when a backup returned. Every event is derived
from its id (:func:`derive_event`), so the harness knows each event's bytes.

After each cut the backing store is checked with the public API only:

- it opens; ``verify_store`` (``tplog verify``) reports no problem and a
  ``rebuild(verify=True)`` no difference (projections equal a replay);
- every acknowledged event is present at its seq and position and equal to the
  event derived from its id (``to_builtins``), unless its thread's deletion was
  acknowledged (then it is gone; a deletion only tried may or may not be);
- in ``relaxed`` mode the acknowledged events missing may only be the newest
  ones (above every position present), from one worker process, and — that
  worker running one thread — from one append; none acknowledged before a
  ``sync`` that returned;
- no batch is partly present; no event appears that no worker tried; what
  survived the previous cut is still there (unless deleted);
- every backup that returned opens and verifies clean, its events equal to
  the derived ones.

The tally counts cuts, acknowledged events checked, ``lost`` (acknowledged and
missing beyond what the mode allows), ``torn`` (batches partly present) and
``problems`` (everything else); all three must be zero/empty.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable from a checkout without installing
    sys.path.insert(0, str(ROOT))

from tplog import Store, ThreadStarted, TplogError, UserTurnSubmitted  # noqa: E402
from tplog.protocol import UserPromptPart, UserTurn  # noqa: E402
from tplog.protocol.json import to_builtins  # noqa: E402
from tplog.store import NO_STREAM  # noqa: E402

FS = ROOT / "tools" / "powerloss_fs.py"
T = "2025-01-20T10:00:00Z"
MAP_SIZE = 1 << 20  # small, so that the map grows during a round


# --------------------------------------------------------------------------- events


def derive_event(event_id: str, thread_id: str) -> Any:
    """The event a worker appends under ``event_id`` (``KIND.SIZE.UNIQUE``)."""
    kind, size, _ = event_id.split(".", 2)
    if kind == "s":
        return ThreadStarted(thread_id=thread_id, created_at=T)
    seed = hashlib.sha256(event_id.encode()).hexdigest()
    text = (seed * (int(size) // 64 + 1))[: int(size)]
    return UserTurnSubmitted(turn=UserTurn(submitted_at=T, parts=[UserPromptPart(content=text)]))


# --------------------------------------------------------------------------- worker (child process)


def worker(store_dir: str, wid: int, threads: int, seed: int, durability: str, steps: int,
           broken: str | None, deterministic: bool) -> None:
    if broken:  # test-only: a commit acknowledged before its flush (the harness must notice)
        import lmdb

        orig = lmdb.open
        from tplog.backends.lmdb import engine as lmdb_engine

        override = {"nosync": {"sync": False}, "nometasync": {"metasync": False}}[broken]
        lmdb.open = lambda *a, **k: orig(*a, **{**k, **override})
        init = lmdb_engine.LmdbEngine.__init__

        def no_meta_flush(self: Any, *a: Any, **k: Any) -> None:  # a durable commit flushes its meta page itself
            init(self, *a, **k)
            self._meta_sync = False

        lmdb_engine.LmdbEngine.__init__ = no_meta_flush  # type: ignore[method-assign]
    out_lock = threading.Lock()

    def emit(obj: dict[str, Any]) -> None:
        line = (json.dumps(obj) + "\n").encode()
        with out_lock:
            os.write(1, line)

    try:
        store = Store(store_dir, durability="durable" if durability == "pipelined" else durability,
                      map_size=MAP_SIZE, check_rules=False,
                      auto_dictionary=0 if deterministic else 200)
    except (TplogError, OSError) as exc:  # cut while opening
        emit({"error": f"{type(exc).__name__}: {exc}"})
        os._exit(3)
    backups = Path(store_dir).parent / "backups"
    # a backup-heavy workload (TPLOG_PL_BACKUP_RATE: the share of thread 0's appends that back up instead)
    extra_backups = float(os.environ.get("TPLOG_PL_BACKUP_RATE", "0"))
    (Path(store_dir).parent / f"ready-{wid}").touch()  # the harness cuts once a worker is this far

    def run_thread(ti: int) -> None:
        rng = random.Random(seed * 1000 + wid * 10 + ti)
        version = 0
        n_thread = 0
        tid = f"w{wid}-{ti}-{seed}-{n_thread}"
        # durability "pipelined": appends through Store.pipeline, acknowledged (the "ack" lines) only
        # once a commit() — a turn's end — returned; what was queued after it may be lost, nothing before
        pipe = None
        queued: list[tuple[list[str], Any]] = []

        def commit_pipe() -> None:
            if pipe is not None:
                pipe.commit()
                for qids, handle in queued:
                    res = handle.result()[0]
                    emit({"ack": qids, "t": tid, "seq": res.last_seq, "pos": res.last_position})
            queued.clear()

        for step in range(steps):
            r = rng.random()
            uniq = f"{wid}-{ti}-{seed}-{step}"
            try:
                if (version and r < 0.03 and not deterministic) or (deterministic and step == steps - 2):
                    commit_pipe()
                    pipe = None
                    emit({"del_try": tid})
                    res = store.delete_thread(tid)
                    emit({"del_ack": tid, "pos": res.last_position})
                    n_thread += 1
                    tid = f"w{wid}-{ti}-{seed}-{n_thread}"
                    version = 0
                    continue
                if r < 0.09 and ti == 0 and not deterministic:
                    emit({"sync_try": 1})
                    store.sync()
                    emit({"sync_ack": 1})
                    continue
                if ti == 0 and not deterministic and (r < 0.097 or (r >= 0.105 and extra_backups
                                                                      and random.random() < extra_backups)):
                    dest = backups / f"b-{wid}-{seed}-{step}"
                    backups.mkdir(exist_ok=True)
                    emit({"backup_try": str(dest)})
                    store.backup(str(dest))
                    emit({"backup": str(dest)})
                    continue
                if r < 0.102 and ti == 0 and not deterministic:
                    store.train_dictionary(samples=200)
                    continue
                if r < 0.105 and ti == 0 and not deterministic:
                    store.rebuild()
                    continue
                ids = [] if version else [f"s.0.{uniq}"]
                for k in range(rng.randint(1, 4)):
                    big = rng.random()
                    size = rng.randint(20, 400) if big < 0.7 else rng.randint(2000, 30000) if big < 0.99 \
                        else 300_000  # now and then a blob
                    ids.append(f"u.{size}.{uniq}-{k}")
                events = [derive_event(i, tid) for i in ids]
                emit({"try": ids, "t": tid})
                if durability == "pipelined":
                    if pipe is None:
                        pipe = store.pipeline(tid, expected_version=version or NO_STREAM)
                    queued.append((ids, pipe.append(events, event_ids=ids)))
                    version += len(ids)
                    if rng.random() < 0.3:
                        commit_pipe()
                    continue
                res = store.append(tid, events, event_ids=ids, expected_version=version or NO_STREAM)
                version = res.last_seq
                emit({"ack": ids, "t": tid, "seq": res.last_seq, "pos": res.last_position})
            except TplogError as exc:  # the cut: the file system fails every operation now
                emit({"error": f"{type(exc).__name__}: {exc}"})
                os._exit(3)
        try:
            commit_pipe()
        except TplogError as exc:
            emit({"error": f"{type(exc).__name__}: {exc}"})
            os._exit(3)

    ts = [threading.Thread(target=run_thread, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    store.close()
    emit({"done": wid})


# --------------------------------------------------------------------------- file system control


class Mount:
    """tools/powerloss_fs.py mounted at ``mnt`` over ``backing``."""

    def __init__(self, backing: Path, mnt: Path, freeze_at_op: int | None = None,
                 fs_args: tuple[str, ...] = ()) -> None:
        self.backing, self.mnt = backing, mnt
        backing.mkdir(parents=True, exist_ok=True)
        mnt.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(FS), str(backing), str(mnt)]
        if freeze_at_op is not None:
            cmd += ["--freeze-at-op", str(freeze_at_op)]
        cmd += fs_args  # tests: --incoherent, --delay-write
        self.err = open(mnt.parent / (mnt.name + ".fs.log"), "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err)
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.frozen_at: int | None = None
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 20
        while not os.path.ismount(mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"powerloss_fs did not mount {mnt} (see {self.err.name})")
            time.sleep(0.02)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            if "auto_frozen_at" in msg:
                self.frozen_at = msg["auto_frozen_at"]
            else:
                self.replies.put(msg)

    def command(self, cmd: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd.encode() + b"\n")
        self.proc.stdin.flush()
        reply = self.replies.get(timeout=60)
        if "error" in reply:
            raise RuntimeError(f"powerloss_fs {cmd}: {reply['error']}")
        return reply

    def unmount(self) -> None:
        for args in (["-u"], ["-u", "-z"]):
            if subprocess.run(["fusermount3", *args, str(self.mnt)], capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def fuse_available() -> str | None:
    """Why this machine cannot run the harness, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "fusermount3 missing (Debian: apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"mfusepy unusable: {exc}"
    return None


# --------------------------------------------------------------------------- tally and checks


@dataclass
class Tally:
    cuts: int = 0
    rounds_flushed: int = 0
    rounds_harsh: int = 0
    workers: int = 0
    acked_events_checked: int = 0
    acked_events_deleted: int = 0
    relaxed_events_lost_allowed: int = 0
    lost: int = 0
    torn: int = 0
    batches_absent: int = 0
    batches_unacked_present: int = 0
    dropped_writes: int = 0
    torn_pages: int = 0
    backups_checked: int = 0
    fresh_store_unopenable: int = 0
    verifies: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["problems"] = len(self.problems)
        return d


@dataclass
class Known:
    """What the store held after the previous cut: event id -> (thread, seq, position)."""

    events: dict[str, tuple[str, int, int]] = field(default_factory=dict)


def _parse(lines: list[bytes], wid: int) -> list[dict[str, Any]]:
    out = []
    for n, raw in enumerate(lines):
        with contextlib.suppress(ValueError):
            msg = json.loads(raw)
            msg["wid"], msg["n"] = wid, n
            out.append(msg)
    return out


def check_backup(path: str, acked_before: list[str]) -> list[str]:
    """A backup that returned: sound, holding what its process had acknowledged before it,
    every event equal to the derived one."""
    tally = Tally()
    try:
        _store_sound(path, tally, "")
        events, bodies, _ = _read_store(path)
    except TplogError as exc:
        return [f"unusable: {type(exc).__name__}: {exc}"]
    out = tally.problems
    missing = [e for e in acked_before if e not in events]
    if missing:
        out.append(f"{len(missing)} events acknowledged before the backup missing, e.g. {missing[:3]}")
    out += [f"{eid} differs" for eid, (tid, _s, _p) in events.items()
            if to_builtins(bodies[eid]) != to_builtins(derive_event(eid, tid))]
    return out


def _read_store(path: str) -> tuple[dict[str, tuple[str, int, int]], dict[str, Any], int]:
    events: dict[str, tuple[str, int, int]] = {}
    bodies: dict[str, Any] = {}
    last = 0
    with Store(path, auto_dictionary=0, check_rules=False) as s:
        for rec in s.iter_all():
            last = max(last, rec.position)
            if type(rec.event).__name__ == "ThreadDeleted":
                continue
            events[rec.event_id] = (rec.thread_id, rec.seq, rec.position)
            bodies[rec.event_id] = rec.event
    return events, bodies, last


def _store_sound(path: str, tally: Tally, label: str) -> None:
    from tplog.verify import verify_store

    with Store(path, auto_dictionary=0, check_rules=False) as s:
        rep = verify_store(s)
        tally.problems += [f"{label}: verify: {p}" for p in rep.problems]
        for r in s.rebuild(verify=True):
            tally.problems += [f"{label}: rebuild --verify {r.projection}: {d}" for d in r.differences]
    tally.verifies += 1


def check(path: str, msgs: list[dict[str, Any]], known: Known, durability: str,
          threads_per_worker: int, tally: Tally, label: str, probe: bool = False) -> None:
    """Check the store at ``path`` after a cut against what the workers printed. ``probe``
    (a broken durability setting: the file may be damaged): open and read it in a child
    first, since LMDB may read past the end of a damaged file (SIGBUS)."""
    if probe:
        p = subprocess.run([sys.executable, str(Path(__file__).resolve()), path, "--check-backup"],
                           input=b"[]", capture_output=True, timeout=300)
        if p.returncode < 0:
            tally.problems.append(f"{label}: store unusable after the cut: reading it killed the reader "
                                  f"(signal {-p.returncode})")
            return
    try:
        present, bodies, last_pos = _read_store(path)
        _store_sound(path, tally, label)
    except Exception as exc:  # untyped ones too: a problem to report, not a harness crash
        # A new store's file is created whole (built aside, flushed, renamed in), so even a cut
        # during its first commit leaves one that opens.
        if not any("ack" in m or "del_ack" in m for m in msgs) and "MDB_INVALID" in str(exc):
            tally.fresh_store_unopenable += 1
        tally.problems.append(f"{label}: store unusable after the cut: {type(exc).__name__}: {exc}")
        return
    deleted_acked = {m["del_ack"] for m in msgs if "del_ack" in m}
    deleted_tried = {m["del_try"] for m in msgs if "del_try" in m}
    tried_ids: set[str] = set()
    for eid, (tid, _seq, _pos) in present.items():  # every event equals the one derived from its id
        if to_builtins(bodies[eid]) != to_builtins(derive_event(eid, tid)):
            tally.problems.append(f"{label}: event {eid} of {tid} differs from what was appended")
    for eid, where in known.events.items():  # what survived the previous cut survives this one
        if where[0] in deleted_tried:
            continue
        if present.get(eid) != where:
            tally.problems.append(f"{label}: {eid} was there after the last cut, now {present.get(eid)}")
    acked = [m for m in msgs if "ack" in m]
    lost: list[dict[str, Any]] = []
    deletes_lost: set[str] = set()
    for m in msgs:  # an acknowledged deletion: the thread's events are gone (or its commit was lost)
        if "del_ack" in m and any(where[0] == m["del_ack"] for where in present.values()):
            deletes_lost.add(m["del_ack"])
            lost.append({"wid": m["wid"], "t": m["del_ack"], "ack": [], "pos": m["pos"], "delete": True})
    synced_before: set[str] = set()  # acks printed before a sync that returned
    for wid in {m["wid"] for m in msgs}:
        seen: list[str] = []
        pending_sync: list[str] | None = None
        for m in (m for m in msgs if m["wid"] == wid):
            if "ack" in m:
                seen += m["ack"]
            elif "sync_try" in m:
                pending_sync = list(seen)
            elif "sync_ack" in m and pending_sync is not None:
                synced_before.update(pending_sync)
    for m in acked:
        tid = m["t"]
        if tid in deleted_acked and tid not in deletes_lost:
            tally.acked_events_deleted += len(m["ack"])
            continue
        if tid in deleted_tried:
            continue
        tally.acked_events_checked += len(m["ack"])
        first = m["seq"] - len(m["ack"]) + 1
        missing = [e for e in m["ack"] if e not in present]
        if missing:
            lost.append(m)
            continue
        for k, eid in enumerate(m["ack"]):
            want = (tid, first + k, m["pos"] - len(m["ack"]) + 1 + k)
            if present[eid] != want:
                tally.problems.append(f"{label}: {eid} acknowledged at {want}, found at {present[eid]}")
    if lost:
        allowed = durability == "relaxed" and _relaxed_loss_allowed(lost, last_pos, threads_per_worker, synced_before)
        n = sum(len(m["ack"]) or 1 for m in lost)  # a lost deletion counts one
        if allowed:
            tally.relaxed_events_lost_allowed += n
        else:
            tally.lost += n
            tally.problems.append(f"{label}: {n} acknowledged events lost ({durability}): "
                                  + ", ".join(f"{m['t']}@{m['pos']}" for m in lost[:5]))
    for m in msgs:  # batches: all or nothing, and nothing nobody tried
        if "try" not in m:
            continue
        tried_ids.update(m["try"])
        if m["t"] in deleted_tried:
            continue
        n = sum(e in present for e in m["try"])
        if 0 < n < len(m["try"]):
            tally.torn += 1
            tally.problems.append(f"{label}: batch {m['try']} of {m['t']} partly present ({n}/{len(m['try'])})")
        elif n == 0:
            tally.batches_absent += 1
        elif not any(a["ack"] == m["try"] for a in acked):
            tally.batches_unacked_present += 1
    phantoms = set(present) - tried_ids - set(known.events)
    if phantoms:
        tally.problems.append(f"{label}: events nobody appended: {sorted(phantoms)[:5]}")
    for m in msgs:
        if "backup" in m:
            # in a child: a copy cut short may make LMDB read past the end of its map (SIGBUS)
            start = next(b["n"] for b in msgs if b.get("backup_try") == m["backup_raw"])
            gone = {d["del_try"] for d in msgs if "del_try" in d and d["wid"] == m["wid"] and d["n"] < m["n"]}
            before = [e for a in msgs if a["wid"] == m["wid"] and "ack" in a and a["n"] < start
                      and a["t"] not in gone for e in a["ack"]]
            p = subprocess.run([sys.executable, str(Path(__file__).resolve()), m["backup"], "--check-backup"],
                               input=json.dumps(before).encode(), capture_output=True, timeout=120)
            try:
                found = json.loads(p.stdout)
            except ValueError:
                found = [f"checking it died ({p.returncode}): {p.stderr.decode(errors='replace')[-300:]}"]
            tally.problems += [f"{label}: backup {m['backup']} returned, after the cut: {x}" for x in found]
            tally.backups_checked += 1
    known.events = present


def _relaxed_loss_allowed(lost: list[dict[str, Any]], last_pos: int, threads_per_worker: int,
                          synced: set[str]) -> bool:
    """``relaxed`` may lose the last committed group: the newest appends, of one process."""
    if any(e in synced for m in lost for e in m["ack"]):
        return False
    if any(m["pos"] - max(len(m["ack"]), 1) + 1 <= last_pos for m in lost):
        return False  # an older commit lost while a newer one survived
    if len({m["wid"] for m in lost}) > 1:
        return False  # commits never span processes
    return not (threads_per_worker == 1 and len(lost) > 1)  # one thread: one append per commit


# --------------------------------------------------------------------------- rounds


def _spawn(store_dir: Path, wid: int, threads: int, seed: int, durability: str, steps: int,
           broken: str | None, deterministic: bool = False) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(store_dir), "--wid", str(wid),
           "--threads", str(threads), "--seed", str(seed), "--durability", durability, "--steps", str(steps)]
    if broken:
        cmd += ["--broken", broken]
    if deterministic:
        cmd.append("--deterministic")
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _collect(procs: list[subprocess.Popen[bytes]]) -> tuple[list[dict[str, Any]], list[str]]:
    msgs: list[dict[str, Any]] = []
    errors: list[str] = []
    for wid, p in enumerate(procs):
        out, err = p.communicate(timeout=60)
        msgs += _parse(out.splitlines(), wid)
        if p.returncode not in (0, 3, -signal.SIGKILL):
            errors.append(f"worker {wid} exited {p.returncode}: {err.decode(errors='replace')[-2000:]}")
    return msgs, errors


def _cut(mount: Mount, procs: list[subprocess.Popen[bytes]], mode: str, seed: int,
         tally: Tally) -> list[dict[str, Any]]:
    """The power cut: freeze, kill the workers, rewrite the backing files, unmount."""
    mount.command("freeze")
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGKILL)
    msgs, errors = _collect(procs)
    tally.problems += errors
    for msg in msgs:  # checked on the backing directory once unmounted
        if "backup" in msg:
            msg["backup_raw"] = msg["backup"]
            msg["backup"] = str(mount.backing / Path(msg["backup"]).relative_to(mount.mnt))
    rep = mount.command(f"cut {mode} {seed}")
    tally.dropped_writes += rep["dropped_writes"]
    tally.torn_pages += rep["torn_pages"]
    mount.unmount()
    tally.cuts += 1
    if mode == "harsh":
        tally.rounds_harsh += 1
    else:
        tally.rounds_flushed += 1
    return msgs


def _keep_failure(dest: Path, precheck: Path, msgs: list[dict[str, Any]], problems: list[str]) -> None:
    """Keep a failed round for a post-mortem: the store as the cut left it, the workers'
    lines and the problems found."""
    with contextlib.suppress(OSError):
        shutil.copytree(precheck, dest)
        (dest / "msgs.json").write_text(json.dumps(msgs))
        (dest / "problems.txt").write_text("\n".join(problems) + "\n")


def run_random(workdir: str, cuts: int, *, seed: int = 0, mode: str = "mixed", durability: str = "mixed",
               writers: int = 2, threads: int = 2, steps: int = 10_000, max_wait: float = 1.5,
               rounds_per_store: int = 5, broken: str | None = None,
               log: Any = None) -> Tally:
    """``cuts`` rounds, each cut at a random moment of a random workload."""
    rng = random.Random(seed)
    tally = Tally()
    base = Path(workdir)
    base.mkdir(parents=True, exist_ok=True)
    known = Known()
    backing = base / "backing-0"
    dur = "durable"
    for r in range(cuts):
        if r % rounds_per_store == 0:  # a fresh store now and then: a soak does not re-check a huge one
            shutil.rmtree(backing, ignore_errors=True)
            backing = base / f"backing-{r}"
            known = Known()
            dur = durability if durability != "mixed" else rng.choice(["durable", "relaxed"])
        # a relaxed round with one thread per worker pins the loss to one append
        tpw = 1 if dur == "relaxed" and rng.random() < 0.5 else threads
        m = mode if mode != "mixed" else rng.choice(["flushed", "harsh"])
        mount = Mount(backing, base / "mnt")
        try:
            store_dir = base / "mnt" / "store"
            procs = [_spawn(store_dir, w, tpw, rng.randrange(1 << 30), dur, steps, broken)
                     for w in range(rng.randint(1, writers))]
            tally.workers += len(procs)
            started = time.monotonic() + 30  # cut once the store is there (now and then before)
            early = rng.random() < 0.05
            while not early and not list(store_dir.parent.glob("ready-*")) and time.monotonic() < started \
                    and any(p.poll() is None for p in procs):
                time.sleep(0.02)
            deadline = time.monotonic() + rng.uniform(0.0, max_wait)
            while time.monotonic() < deadline and any(p.poll() is None for p in procs):
                time.sleep(0.01)
            msgs = _cut(mount, procs, m, rng.randrange(1 << 30), tally)
        except BaseException:
            mount.unmount()
            raise
        before = (tally.lost, tally.torn, len(tally.problems))
        precheck = base / "precheck"  # the store as the cut left it: checking it opens it
        shutil.rmtree(precheck, ignore_errors=True)
        if broken is None and (backing / "store").exists():
            shutil.copytree(backing / "store", precheck / "store")
        if (backing / "store").exists():
            check(str(backing / "store"), msgs, known, dur, tpw, tally, f"round {r} ({dur}, {m})",
                  probe=broken is not None)
        if broken is None and (tally.lost, tally.torn, len(tally.problems)) != before:
            _keep_failure(base / f"failed-round-{r}", precheck, msgs, tally.problems[before[2]:])
            if log:
                for p in tally.problems[before[2]:]:
                    log(f"problem: {p} (kept in {base / f'failed-round-{r}'})")
        if log:
            log(f"round {r}: {dur}/{m} {len(msgs)} lines, {tally.cuts} cuts, {tally.acked_events_checked} "
                f"acked checked, lost {tally.lost}, torn {tally.torn}, problems {len(tally.problems)}")
        shutil.rmtree(backing / "backups", ignore_errors=True)
        for ready in backing.glob("ready-*"):
            ready.unlink()
    shutil.rmtree(backing, ignore_errors=True)
    return tally


def run_boundaries(workdir: str, *, seed: int = 0, steps: int = 5, modes: tuple[str, ...] = ("flushed", "harsh"),
                   durability: str = "durable", broken: str | None = None, log: Any = None) -> Tally:
    """A short deterministic run (one worker, one thread), cut before each of its data
    operations in turn (first with ``modes[0]``, then alternating)."""
    tally = Tally()
    base = Path(workdir)
    base.mkdir(parents=True, exist_ok=True)
    dry = base / "dry"
    mount = Mount(dry, base / "mnt")
    try:
        p = _spawn(base / "mnt" / "store", 0, 1, seed, durability, steps, broken, deterministic=True)
        _, errors = _collect([p])
        total = mount.command("stats")["ops"]
    finally:
        mount.unmount()
    shutil.rmtree(dry, ignore_errors=True)
    if errors:
        raise RuntimeError(errors[0])
    for n in range(1, total + 2):
        backing = base / f"cut-{n}"
        mount = Mount(backing, base / "mnt", freeze_at_op=n)
        try:
            p = _spawn(base / "mnt" / "store", 0, 1, seed, durability, steps, broken, deterministic=True)
            p.wait(timeout=120)  # it stops at the freeze (EIO) or finishes (n past the end)
            msgs = _cut(mount, [p], modes[n % len(modes)], seed + n, tally)
        except BaseException:
            mount.unmount()
            raise
        if (backing / "store").exists():
            check(str(backing / "store"), msgs, Known(), durability, 1, tally, f"cut before op {n}/{total}",
                  probe=broken is not None)
        tally.workers += 1
        if log:
            log(f"cut before op {n}/{total}: {len(msgs)} lines, lost {tally.lost}, problems {len(tally.problems)}")
        shutil.rmtree(backing, ignore_errors=True)
    return tally


def run_soak(workdir: str, cuts: int, *, seed: int = 0, log: Any = None) -> Tally:
    """``cuts`` cuts: 60 % at random moments, the rest at the flush boundaries of short
    runs (durable and relaxed in turn, a new seed each)."""
    tally = run_random(str(Path(workdir) / "random"), cuts * 6 // 10, seed=seed, log=log)
    i = 0
    while tally.cuts < cuts:
        dur = ("durable", "relaxed")[i % 2]
        t = run_boundaries(str(Path(workdir) / f"boundaries-{i}"), seed=seed + i, steps=5 + i % 4,
                           durability=dur)
        for k, v in t.__dict__.items():
            setattr(tally, k, getattr(tally, k) + v)
        if log:
            log(f"boundaries {i} ({dur}): {tally.cuts} cuts, lost {tally.lost}, problems {len(tally.problems)}")
        i += 1
    return tally


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("workdir")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--wid", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=None, help="worker steps (default: 10000 random, 5 boundaries)")
    ap.add_argument("--deterministic", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--check-backup", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cuts", type=int, default=50)
    ap.add_argument("--boundaries", action="store_true", help="cut a short run before each data operation")
    ap.add_argument("--soak", action="store_true", help="--cuts cuts: 60%% random, the rest flush boundaries")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--mode", default="mixed", choices=["mixed", "flushed", "harsh"])
    ap.add_argument("--durability", default="mixed", choices=["mixed", "durable", "relaxed", "pipelined"])
    ap.add_argument("--writers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--broken", choices=["nosync", "nometasync"], default=None,
                    help="open LMDB with a broken durability setting (the harness must report losses)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    if args.check_backup:
        print(json.dumps(check_backup(args.workdir, json.load(sys.stdin))))
        return 0
    if args.worker:
        worker(args.workdir, args.wid, args.threads, seed, args.durability, args.steps or 10_000, args.broken,
               args.deterministic)
        return 0
    why = fuse_available()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    if args.soak:
        tally = run_soak(args.workdir, args.cuts, seed=seed, log=print)
    elif args.boundaries:
        dur = "durable" if args.durability == "mixed" else args.durability
        tally = run_boundaries(args.workdir, seed=seed, steps=args.steps or 5, durability=dur, broken=args.broken,
                               log=print)
    else:
        tally = run_random(args.workdir, args.cuts, seed=seed, mode=args.mode, durability=args.durability,
                           writers=args.writers, threads=args.threads, broken=args.broken, log=print,
                           **({"steps": args.steps} if args.steps else {}))
    print(json.dumps({"seed": seed, "seconds": round(time.monotonic() - t0, 1), **tally.as_dict()}, indent=2))
    for p in tally.problems[:20]:
        print("problem:", p)
    return 1 if tally.problems else 0


if __name__ == "__main__":
    sys.exit(main())
