"""A FUSE file system that can lose power: what was not flushed is gone after a cut.

Run it (root, ``fusermount3`` from Debian's ``fuse3``, ``mfusepy`` from PyPI)::

    python tools/powerloss_fs.py BACKING MOUNT [--freeze-at-op N] [--incoherent] [--delay-write OFF:S]

It mounts ``MOUNT`` as a passthrough of the directory ``BACKING``: every
operation goes straight to the backing files (so reads, and LMDB's mmap reads
through the kernel's page cache, see every write at once), but each write to a
regular file that is not yet *flushed* is also remembered, per file and in
order, as ``(offset, new bytes, old bytes, old size)``. A flush is an
``fsync``/``fdatasync`` of the file (any of its handles: the kernel's page cache
is per file), or the write itself on a handle opened with ``O_SYNC``/``O_DSYNC``
(how LMDB writes its meta page in ``durable`` mode). An ``fsync`` on such a
handle flushes nothing more: the kernel sends one after each such write, and on
a real disk it covers only the written range.

Commands, one line each on stdin, answered with one JSON line on stdout:

- ``stats``: operations and flushes so far, the writes pending.
- ``freeze``: the power cut's instant: from now on every operation but reads
  fails with ``EIO`` (so nothing a process does afterwards reaches the disk, and
  no append can be acknowledged after the cut on the strength of a later flush).
- ``cut MODE SEED``: (frozen only) rewrites the backing files to what the disk
  would hold after the cut, and reports what was dropped. ``MODE`` is
  ``flushed`` (only the flushed writes survive: the page cache is lost whole)
  or ``harsh`` (besides, each unflushed write split into 4 KiB pages, each
  page kept, dropped, or torn — a random subset of its 512-byte sectors kept —
  and the kept pieces written in random order: what a disk that reorders its
  writeback does). The flushed writes are then re-applied in their order.

The kernel's page cache of a file is the truth while mounted: files are opened
with ``keep_cache`` and the kernel's automatic invalidation (``auto_inval_data``:
drop a file's cached pages when a refreshed mtime or size differs) is off. Without
that, every ``open`` and every attribute refresh after a write dropped the file's
pages, and a drop racing another process's full-page ``write`` still on its way to
this daemon let a reader fault in the page's old bytes from here — and keep them
after the write returned. LMDB reads its tree through that cache (its map): a writer
could then commit on a stale root and silently undo the commit before it
(``tests/test_powerloss.py::test_page_cache_stays_coherent_with_a_write_in_flight``).
``--incoherent`` mounts as before, for that test. The daemon is the only other
writer of the backing files, and only after the freeze, before the unmount.

``--delay-write OFFSET:SECONDS`` (tests) holds every write covering ``OFFSET`` that long
before the daemon takes it: a write in flight, deterministically.

``--freeze-at-op N`` freezes by itself when the N-th data operation (write or
flush, counting from 1) arrives, before carrying it out, and prints
``{"auto_frozen_at": N}``: cuts at exact points of a run (between the data flush and
the meta page of a commit included).

Metadata (create, rename, unlink, mkdir, truncate) is durable at once: the
model is about file contents, as LazyFS's is. A truncate first flushes the file.
Unmount with ``fusermount3 -u MOUNT`` after ``cut``; the process then exits.
"""

from __future__ import annotations

import argparse
import errno
import faulthandler
import json
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import mfusepy as fuse

SECTOR = 512
PAGE = 4096
# libfuse 3's fuse_common.h
FUSE_CAP_AUTO_INVAL_DATA = 1 << 12
FUSE_CAP_EXPLICIT_INVAL_DATA = 1 << 25


@dataclass
class _Write:
    offset: int
    data: bytes
    old: bytes  # what the range held before (shorter than data past the end of the file)
    old_size: int
    durable: bool  # written through an O_SYNC/O_DSYNC handle


@dataclass
class _FileLog:
    writes: list[_Write] = field(default_factory=list)  # since the file's last flush


class PowerLossFS(fuse.Operations):  # type: ignore[misc]
    use_ns = True

    def __init__(self, root: str, freeze_at_op: int | None = None, *, coherent: bool = True,
                 delay_write: tuple[int, float] | None = None) -> None:
        self.root = os.path.realpath(root)
        self.coherent = coherent
        self.delay_write = delay_write
        self._mu = threading.RLock()
        self.logs: dict[str, _FileLog] = {}
        self.handles: dict[int, tuple[str, bool]] = {}  # fd -> (path, synchronous)
        self.ops = 0  # data operations: writes and flushes
        self.flushes = 0
        self.frozen = False
        self.freeze_at_op = freeze_at_op

    # ------------------------------------------------------------------ helpers

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _check(self) -> None:
        if self.frozen:
            raise fuse.FuseOSError(errno.EIO)

    def _data_op(self) -> None:
        """Count a write or flush; freeze at the configured one (not carried out)."""
        self._check()
        self.ops += 1
        if self.freeze_at_op is not None and self.ops >= self.freeze_at_op:
            self.frozen = True
            os.write(sys.stdout.fileno(), (json.dumps({"auto_frozen_at": self.ops}) + "\n").encode())
            raise fuse.FuseOSError(errno.EIO)

    def _flush_path(self, path: str) -> None:
        self.logs.pop(path, None)

    # ------------------------------------------------------------------ control

    def stats(self) -> dict[str, Any]:
        with self._mu:
            return {"ops": self.ops, "flushes": self.flushes, "frozen": self.frozen,
                    "pending_writes": sum(sum(not w.durable for w in log.writes) for log in self.logs.values())}

    def freeze(self) -> dict[str, Any]:
        with self._mu:
            self.frozen = True
        return self.stats()

    def cut(self, mode: str, seed: int) -> dict[str, Any]:
        """Rewrite the backing files to what survives the power cut."""
        rng = random.Random(seed)
        out = {"mode": mode, "files": 0, "dropped_writes": 0, "dropped_bytes": 0,
               "kept_pages": 0, "torn_pages": 0, "lost_pages": 0}
        with self._mu:
            if not self.frozen:
                raise RuntimeError("cut before freeze")
            for path, log in sorted(self.logs.items()):
                if not log.writes:
                    continue
                full = self._full(path)
                if not os.path.exists(full):
                    continue
                out["files"] += 1
                fd = os.open(full, os.O_RDWR)
                try:
                    for w in reversed(log.writes):  # back to the file as of its last flush
                        os.pwrite(fd, w.old, w.offset)
                        os.ftruncate(fd, w.old_size)
                    pending = [w for w in log.writes if not w.durable]
                    out["dropped_writes"] += len(pending)
                    out["dropped_bytes"] += sum(len(w.data) for w in pending)
                    if mode == "harsh":
                        pieces: list[tuple[int, bytes]] = []
                        for w in pending:
                            for start in range(w.offset - w.offset % PAGE, w.offset + len(w.data), PAGE):
                                lo, hi = max(start, w.offset), min(start + PAGE, w.offset + len(w.data))
                                chunk = w.data[lo - w.offset:hi - w.offset]
                                r = rng.random()
                                if r < 0.4:
                                    out["lost_pages"] += 1
                                elif r < 0.8:
                                    out["kept_pages"] += 1
                                    pieces.append((lo, chunk))
                                else:  # torn: some of its sectors reached the disk
                                    out["torn_pages"] += 1
                                    for s in range(lo - lo % SECTOR, hi, SECTOR):
                                        a, b = max(s, lo), min(s + SECTOR, hi)
                                        if rng.random() < 0.5:
                                            pieces.append((a, chunk[a - lo:b - lo]))
                        rng.shuffle(pieces)
                        for off, chunk in pieces:
                            os.pwrite(fd, chunk, off)
                    for w in log.writes:  # what was flushed (O_DSYNC writes) stays, in its order
                        if w.durable:
                            os.pwrite(fd, w.data, w.offset)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self.logs.clear()
        return out

    # ------------------------------------------------------------------ file system

    def init_with_config(self, conn: Any, config: Any) -> None:
        """Keep the kernel's page cache (see the module's docstring): the pass-through must
        give LMDB the unified buffer cache it assumes, as a real file system does."""
        if not self.coherent:
            return
        if conn is not None:
            conn.want &= ~FUSE_CAP_AUTO_INVAL_DATA
            if conn.capable & FUSE_CAP_EXPLICIT_INVAL_DATA:  # nor on a size change
                conn.want |= FUSE_CAP_EXPLICIT_INVAL_DATA
        if config is not None:
            config.kernel_cache = 1  # keep_cache at every open

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        self._check()
        st = os.lstat(self._full(path))
        return {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_ino")} | {
            "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

    def access(self, path: str, amode: int) -> int:
        self._check()
        if not os.access(self._full(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    def readdir(self, path: str, fh: int) -> list[str]:
        self._check()
        return [".", "..", *os.listdir(self._full(path))]

    def mkdir(self, path: str, mode: int) -> int:
        self._check()
        os.mkdir(self._full(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        self._check()
        os.rmdir(self._full(path))
        return 0

    def unlink(self, path: str) -> int:
        self._check()
        with self._mu:
            os.unlink(self._full(path))
            self.logs.pop(path, None)
        return 0

    def rename(self, old: str, new: str) -> int:
        self._check()
        with self._mu:
            os.rename(self._full(old), self._full(new))
            if old in self.logs:
                self.logs[new] = self.logs.pop(old)
            else:
                self.logs.pop(new, None)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        self._check()
        os.chmod(self._full(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        self._check()
        os.chown(self._full(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        self._check()
        os.utime(self._full(path), ns=times)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._full(path))
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                            "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    def _opened(self, path: str, fd: int, flags: int) -> int:
        with self._mu:
            self.handles[fd] = (path, bool(flags & (os.O_SYNC | os.O_DSYNC)))
        return fd

    @staticmethod
    def _backing_flags(flags: int) -> int:
        """The handle's sync flag is ours to model; a writer's fd must also read (the old
        bytes of each write); the kernel has already placed appends and direct writes."""
        drop = os.O_SYNC | os.O_DSYNC | os.O_APPEND | getattr(os, "O_DIRECT", 0) | os.O_ACCMODE
        return (flags & ~drop) | (os.O_RDONLY if flags & os.O_ACCMODE == os.O_RDONLY else os.O_RDWR)

    def open(self, path: str, flags: int) -> int:
        self._check()
        if flags & os.O_TRUNC:
            with self._mu:
                self._flush_path(path)
        return self._opened(path, os.open(self._full(path), self._backing_flags(flags)), flags)

    def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
        self._check()
        with self._mu:
            self._flush_path(path)
        fd = os.open(self._full(path), self._backing_flags(flags | os.O_CREAT), mode)
        return self._opened(path, fd, flags)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        # Served even when frozen: reads change nothing on disk, and failing them would SIGBUS
        # a worker faulting in LMDB's map between the freeze and its SIGKILL.
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        if self.delay_write is not None and offset <= self.delay_write[0] < offset + len(data):
            time.sleep(self.delay_write[1])  # outside the lock: reads go on meanwhile
        with self._mu:
            self._data_op()
            name, synchronous = self.handles.get(fh, (path, False))
            size = os.fstat(fh).st_size
            old = os.pread(fh, len(data), offset)
            n = os.pwrite(fh, data, offset)
            log = self.logs.setdefault(name, _FileLog())
            log.writes.append(_Write(offset, data[:n], old, size, synchronous))
            if synchronous:
                self.flushes += 1
            return n

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        self._check()
        with self._mu:
            self._flush_path(path)
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(self._full(path), length)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self._mu:
            name, synchronous = self.handles.get(fh, (path, False))
            if synchronous:  # the kernel's own after an O_DSYNC write: already durable
                self._check()
                return 0
            self._data_op()
            self.flushes += 1
            self._flush_path(name)
        return 0

    def flush(self, path: str, fh: int) -> int:  # close(): not a flush to the disk
        return 0

    def release(self, path: str, fh: int) -> int:
        with self._mu:
            self.handles.pop(fh, None)
        os.close(fh)
        return 0


def _lines(fd: int) -> Any:
    """Command lines from ``fd``, each as soon as it arrives (unbuffered reads)."""
    buf = b""
    while chunk := os.read(fd, 4096):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode()


def _control(fs: PowerLossFS) -> None:
    for line in _lines(sys.stdin.fileno()):
        words = line.split()
        if not words:
            continue
        try:
            if words[0] == "stats":
                reply: dict[str, Any] = fs.stats()
            elif words[0] == "freeze":
                reply = fs.freeze()
            elif words[0] == "cut":
                reply = fs.cut(words[1], int(words[2]))
            else:
                reply = {"error": f"unknown command {words[0]!r}"}
        except Exception as exc:  # reported to the harness, which fails the round
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(sys.stdout.fileno(), (json.dumps(reply) + "\n").encode())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("backing")
    ap.add_argument("mount")
    ap.add_argument("--freeze-at-op", type=int, default=None)
    ap.add_argument("--incoherent", action="store_true", help="the kernel drops cached pages as before (tests)")
    ap.add_argument("--delay-write", default=None, metavar="OFFSET:SECONDS")
    args = ap.parse_args(argv)
    delay = None
    if args.delay_write:
        off, secs = args.delay_write.split(":")
        delay = (int(off), float(secs))
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a hung harness asks for the stacks
    fs = PowerLossFS(args.backing, args.freeze_at_op, coherent=not args.incoherent, delay_write=delay)
    threading.Thread(target=_control, args=(fs,), daemon=True).start()
    fuse.FUSE(fs, args.mount, foreground=True, nothreads=False, default_permissions=True)


if __name__ == "__main__":
    main()
