"""The CLI on PostgreSQL URLs: reading never creates (a mistyped database or schema is an error,
nothing made), a bad URL parameter is ``error: …`` and exit 2, and no password is ever shown."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
from pathlib import Path

import psycopg
import pytest
from test_cli import DOC, TID, fails, ok_json

from tplog.backends.dsn import redact, scrub
from tplog.backends.postgres import PostgresRecorder, PostgresUnavailableError, SchemaError
from tplog.errors import InvalidInputError

from .pg_server import password_role

READERS = [["threads"], ["stat"], ["export", TID], ["turns", TID], ["read", TID], ["pending", TID],
           ["children", TID], ["tail", "--timeout", "0.1"], ["prune-reports"], ["delete", TID],
           ["fork", TID, "--at", "1"], ["train"], ["rebuild"], ["verify"]]


def _schemas(dsn: str, name: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as c:
        return [r[0] for r in c.execute("SELECT nspname FROM pg_namespace WHERE nspname = %s", (name,))]


@pytest.mark.parametrize("argv", READERS, ids=[a[0] for a in READERS])
def test_no_verb_but_import_creates_a_store(capsys: pytest.CaptureFixture[str], pg_dsn: str, schema: str,
                                            argv: list[str]) -> None:
    url = f"{pg_dsn}?schema={schema}"
    fails(capsys, argv[0], url, *argv[1:], match=rf"^error: .* has no tplog schema '{schema}'")
    assert _schemas(pg_dsn, schema) == []  # no schema, so no tables either


def test_import_creates_the_store_the_readers_then_find(capsys: pytest.CaptureFixture[str], pg_dsn: str,
                                                        schema: str, tmp_path: Path) -> None:
    url = f"{pg_dsn}?schema={schema}"
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(DOC))
    assert ok_json(capsys, "import", url, str(doc))["first_seq"] == 1
    assert _schemas(pg_dsn, schema) == [schema]
    assert [t["thread_id"] for t in ok_json(capsys, "threads", url)["threads"]] == [TID]


def test_a_database_that_does_not_exist_is_an_error_in_a_real_process(pg_dsn: str) -> None:
    url = urllib.parse.urlunsplit(urllib.parse.urlsplit(pg_dsn)._replace(path="/no_such_db"))
    proc = subprocess.run([sys.executable, "-m", "tplog", "threads", url], capture_output=True, text=True,
                          timeout=120)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr.startswith(f"error: cannot connect to PostgreSQL at {url}: ") and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("query", "match"), [
    ("logs=abc", r"^error: logs must be an int in 1\.\.4096, not 'abc'$"),
    ("logs=", r"^error: logs must be an int in 1\.\.4096, not ''$"),
    ("writers=²", r"^error: writers must be an int in 1\.\.16, not '²'$"),
    ("connect_timeout=abc", r"^error: bad PostgreSQL URL '.*connect_timeout=abc': "),
])
def test_a_bad_url_parameter_is_an_error_naming_it(capsys: pytest.CaptureFixture[str], pg_dsn: str, schema: str,
                                                   query: str, match: str, tmp_path: Path) -> None:
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(DOC))
    for verb in ("threads", "import", "migrate"):
        argv = [verb, f"{pg_dsn}?schema={schema}&{query}"] + ([str(doc)] if verb == "import" else [])
        fails(capsys, *argv, match=match)
    assert _schemas(pg_dsn, schema) == []


def test_a_url_that_does_not_parse_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    fails(capsys, "threads", "postgresql://u:pw0rd@[::1/db?password=pw1", match=r"^error: bad PostgreSQL URL ")
    assert "pw0rd" not in capsys.readouterr().err


# --------------------------------------------------------------------------- no password shown


def _pw_user(dsn: str) -> str:
    """A role that logs in with a password (``right``), and the server asking for it (scram)."""
    password_role(dsn, "pwuser2")
    u = urllib.parse.urlsplit(dsn)
    return f"postgresql://pwuser2@127.0.0.1:{u.port}{u.path}"


def test_no_error_shows_a_password_given_in_the_query(capsys: pytest.CaptureFixture[str], pg_dsn: str) -> None:
    base = _pw_user(pg_dsn)
    for url in (f"{base}?password=Wr0ngPw&sslpassword=SslS3cret",
                f"{base.replace('pwuser2@', 'pwuser2:Wr0ngPw@')}?sslpassword=SslS3cret"):
        with pytest.raises(PostgresUnavailableError) as info:  # a real refused login
            PostgresRecorder(url)
        message = str(info.value)
        assert not info.value.retryable
        assert "Wr0ngPw" not in message and "SslS3cret" not in message and "sslpassword=***" in message
        line = fails(capsys, "threads", url, match=r"^error: cannot connect to PostgreSQL at postgresql://pwuser2")
        assert "Wr0ngPw" not in line and "SslS3cret" not in line
    # a key=value conninfo string is no URL: refused, without showing its password either
    with pytest.raises(InvalidInputError, match=r"^not a PostgreSQL URL .*'host=h password=\*\*\* user=u'$"):
        PostgresRecorder("host=h password=Wr0ngPw user=u")


def test_no_output_shows_a_password(capsys: pytest.CaptureFixture[str], pg_dsn: str, schema: str,
                                    tmp_path: Path) -> None:
    base = _pw_user(pg_dsn)
    url = f"{base}?schema={schema}&password=right"
    db = urllib.parse.urlsplit(pg_dsn).path.lstrip("/")
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f'REVOKE CREATE ON DATABASE "{db}" FROM pwuser2'.encode())
        # a role that may not create the schema: a typed error, as every other refusal
        fails(capsys, "migrate", url, match=rf"^error: cannot create tplog schema '{schema}' at .*password=\*\*\*: ")
        c.execute(f'GRANT CREATE ON DATABASE "{db}" TO pwuser2'.encode())
    rep = ok_json(capsys, "migrate", url)
    assert rep["url"] == f"{base}?schema={schema}&password=***"
    src = tmp_path / "src"
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(DOC))
    ok_json(capsys, "import", str(src), str(doc))
    rep = ok_json(capsys, "copy", str(src), url)
    assert rep["dest"] == f"{base}?schema={schema}&password=***" and rep["threads"] == 1
    line = fails(capsys, "import", url, str(doc), match=rf"^error: thread {TID} is already in ")
    assert "right" not in line.replace("password=***", "")
    with pytest.raises(SchemaError) as info:  # what a missing schema's error names
        PostgresRecorder(f"{base}?schema={schema}x&password=right", create=False)
    assert "right" not in str(info.value).replace("password=***", "")


def test_redact_and_scrub_mask_every_secret() -> None:
    assert redact("postgresql://u:p:w@d@h:5/db?schema=s&password=a&sslpassword=b#f") == (
        "postgresql://u:***@h:5/db?schema=s&password=***&sslpassword=***#f")
    assert redact("postgresql://u@h/db?pass%77ord=a&x=1") == "postgresql://u@h/db?pass%77ord=***&x=1"
    assert redact("host=h password = 'a b\\' c' sslpassword=d dbname=x") == (
        "host=h password = *** sslpassword=*** dbname=x")
    for plain in ("./store", "memory:", "lmdb:///s", "postgresql://u@h/db?password", "postgresql://h/db#x"):
        assert redact(plain) == plain
    assert scrub('bad token: "p%zz" then a b', "postgresql://u:p%zz@h/db?password=a%20b") == (
        'bad token: "***" then ***')
    assert scrub("nothing secret", "./store") == "nothing secret"
    assert scrub("an empty password hides nothing", "postgresql://u:@h/db") == "an empty password hides nothing"
    assert redact("postgresql://u:@h/db") == "postgresql://u:***@h/db"
