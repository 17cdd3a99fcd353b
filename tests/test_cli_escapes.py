"""Stored text cannot drive the terminal that shows it.

Titles, prompts, answers, agent names and metadata come from chat users; a terminal obeys the
escape sequences in them (set the window title, clear the screen, plant an OSC 8 hyperlink, flip
text right-to-left). Every view for people (tables, trees, key/value lines, event lines; with
rich and without) shows them as visible escapes (``\\x1b``); JSON keeps them exactly (escaped).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_human import ROOT, terminal_bytes

from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnStarted,
    MessageRecorded,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.protocol import model as m
from tplog.store import Store

TID = "5d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6"
AGENT = "7d9f3c2e-0000-4000-8000-000000000001"
T = "2025-01-20T10:00:00Z"
EVIL = "a\x1b]0;pwned\x07b\x1b[2Jc\x1b]8;;http://x\x1b\\d\u202ee\x9bf\x7fg\x00h"
RAW = (b"\x1b]", b"\x1b[2J", b"\x07", "\u202e".encode(), "\x9b".encode(), b"\x7f", b"\x00")


@pytest.fixture
def store(tmp_path: Path) -> str:
    path = str(tmp_path / "store")
    with Store(path) as s:
        s.append(TID, [
            ThreadStarted(thread_id=TID, created_at=T, title=EVIL, metadata={"note": EVIL}),
            AgentRegistered(agent=m.AgentConfig(agent_id=AGENT, agent_name=EVIL, created_at=T)),
            UserTurnSubmitted(turn=m.UserTurn(submitted_at=T, parts=[m.UserPromptPart(content=EVIL)])),
            AgentTurnStarted(agent_id=AGENT, started_at=T),
            MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id=AGENT, parts=[m.TextPart(content=EVIL)])),
            AgentTurnCompleted(completed_at=T),
        ])
    return path


def test_clean_shows_every_control_character_as_its_escape() -> None:
    from tplog.console import clean

    assert clean(EVIL) == "a\\x1b]0;pwned\\x07b\\x1b[2Jc\\x1b]8;;http://x\\x1b\\d\\u202ee\\x9bf\\x7fg\\x00h"
    assert clean("one\ntwo\tthree\rfour") == "one two three four"  # a field is one line
    assert clean("Grüße, 天气 ☀") == "Grüße, 天气 ☀"  # printable text of any script is untouched


@pytest.mark.parametrize("rich", [True, False], ids=["rich", "plain"])
@pytest.mark.parametrize("argv", [("threads",), ("threads", "--title", "pwned"), ("tree", TID), ("turns", TID),
                                  ("read", TID), ("tail", TID, "--after", "0", "--timeout", "0")])
def test_a_terminal_never_gets_stored_control_characters(store: str, argv: tuple[str, ...], rich: bool) -> None:
    out = terminal_bytes(argv[0], store, *argv[1:], pre="" if rich else "sys.modules['rich'] = None", columns=250)
    for raw in RAW:
        assert raw not in out, (argv, raw, out)
    assert b"\\x1b]0;pwned\\x07" in out, out  # shown, as an escape, where the text was


def test_json_keeps_the_text_exactly(store: str) -> None:
    r = subprocess.run([sys.executable, "-m", "tplog", "threads", store], capture_output=True, cwd=ROOT, check=True)
    assert json.loads(r.stdout)["threads"][0]["title"] == EVIL
    assert b"\x1b" not in r.stdout  # JSON escapes it (\u001b)
