"""A real PostgreSQL server for the tests: Debian's binaries, 127.0.0.1, a temporary data directory.

PostgreSQL refuses to run as root, and CI runs as root, so the server runs as an unprivileged
user (``postgres`` when it exists, else one created for it) through ``runuser``; the test-server
libraries (pytest-postgresql, testing.postgresql) start it as the calling user, which fails here.
Without the binaries the tests skip with a message, except under ``CI=true``, where they fail.

``TPLOG_TEST_PG_DSN=postgresql://...``: the tests use that already-running server instead of starting
one (``shared_dsn``); mutmut's runs need it (it forks a child per mutant: a server per child is slow,
and a forked child's atexit never runs). Every test makes its own schema, named after its process id,
so runs can share the server; a process's first use drops the schemas an earlier process with the
same (reused) id left there.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

INSTALL_HINT = "install PostgreSQL (Debian: apt-get install postgresql) to run the PostgreSQL tests"


def find_bindir() -> str | None:
    """The directory holding initdb and pg_ctl: pg_config's, else the newest under /usr/lib/postgresql."""
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False).stdout.strip()
        if out and os.path.exists(os.path.join(out, "initdb")):
            return out
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(found[-1]) if found else None


#: Whether the running test is marked ``pg`` (tests/conftest.py sets it before each test); True outside pytest.
running_marked = True


def check_marked() -> None:
    """Fail a test that reaches PostgreSQL unmarked: ``make test-fast`` (``-m "not pg"``) would run it."""
    if not running_marked:
        raise AssertionError("this test uses PostgreSQL but is not marked pg: add it to PG_TESTS in tests/conftest.py")


_cleaned: list[int] = []  # the process ids whose leftover schemas were dropped (a fork inherits the list)


def shared_dsn() -> str | None:
    """``TPLOG_TEST_PG_DSN`` when set, after dropping this process id's schemas left by an earlier process."""
    dsn = os.environ.get("TPLOG_TEST_PG_DSN")
    if not dsn or os.getpid() in _cleaned:
        return dsn or None
    import psycopg

    # The tests name schemas <letters><pid>_<n> or <letters><pid>: those of a dead process with our id.
    mine = re.compile(rf"[a-z]+{os.getpid()}(_.*)?")
    with psycopg.connect(dsn, autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT nspname FROM pg_namespace")]
        for name in names:
            if mine.fullmatch(name):
                conn.execute(f'DROP SCHEMA "{name}" CASCADE'.encode())
    _cleaned.append(os.getpid())
    return dsn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> str | None:
    """The user to run the server as: None when not root (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "tplog-pg"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    subprocess.run(["useradd", "--system", "--no-create-home", "tplog-pg"], check=True)
    return "tplog-pg"


class PostgresServer:
    """``with PostgresServer() as pg: pg.dsn``: a throwaway cluster, stopped and deleted on exit."""

    def __init__(self) -> None:
        bindir = find_bindir()
        if bindir is None:
            raise FileNotFoundError(INSTALL_HINT)
        self.bindir = bindir
        self.user = _run_as()
        self.base = Path(tempfile.mkdtemp(prefix="tplog-pg-"))
        self.data = self.base / "data"
        self.port = _free_port()
        self.dsn = f"postgresql://tplog@127.0.0.1:{self.port}/tplog"

    def _cmd(self, *args: str) -> list[str]:
        cmd = [os.path.join(self.bindir, args[0]), *args[1:]]
        return ["runuser", "-u", self.user, "--", *cmd] if self.user else cmd

    def start(self) -> PostgresServer:
        if self.user:
            shutil.chown(self.base, self.user)
        subprocess.run(self._cmd("initdb", "-D", str(self.data), "-U", "tplog", "-A", "trust", "--no-sync",
                                 "-E", "UTF8", "--locale=C"), check=True, capture_output=True)
        opts = (f"-h 127.0.0.1 -p {self.port} -k {self.base} -c fsync=on -c max_connections=200 "
                "-c shared_buffers=128MB")
        subprocess.run(self._cmd("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.base / "log"),
                                 "-w", "-t", "60", "start"), check=True, capture_output=True)
        subprocess.run(self._cmd("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "tplog", "tplog"),
                       check=True, capture_output=True)
        return self

    def stop(self) -> None:
        if self.data.exists():
            subprocess.run(self._cmd("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop"),
                           check=False, capture_output=True)
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def password_role(dsn: str, role: str) -> None:
    """Make ``role`` a login that needs its password (``right``): scram for it from 127.0.0.1, ahead
    of the server's trust rules (written once per server; the rule line itself is looked for)."""
    import time

    import psycopg

    with psycopg.connect(dsn, autocommit=True) as c:
        hba = c.execute("SHOW hba_file").fetchone()[0]  # type: ignore[index]
        c.execute(f"DROP ROLE IF EXISTS {role}")
        c.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'right'")
        rule = f"host all {role} 127.0.0.1/32 scram-sha-256\n"
        with open(hba) as f:
            rules = f.read()
        if rule not in rules:
            with open(hba, "w") as f:
                f.write(rule + rules)
            c.execute("SELECT pg_reload_conf()")
            time.sleep(0.3)
