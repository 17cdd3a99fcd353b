"""Every view of :func:`tplog.render.render` and :func:`tplog.render.event_line`, line by line, as a
person reads it without rich (:func:`tplog.console.plain_text`): each part kind, a turn's agent and
times, the cut to one line, the empty and the optional blocks, and which columns rich may wrap.

Written against mutation testing's survivors (tests/MUTANTS.md, "tplog/render.py").
"""

from __future__ import annotations

from typing import Any

from tplog.console import Table, plain_text
from tplog.render import activity, event_line, iso_ns, render, size

U = "6c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
V = "7c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
NS = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z


def show(command: str, data: Any) -> str:
    return plain_text(render(command, data))


def test_turns_show_each_part_kind_the_agents_and_the_times() -> None:
    turns = {
        "thread_id": "t1", "title": "Plan\n a  trip", "agents": {U: "bot", V: "bot", "x": "solo"},
        "turns": [
            {"turn_type": "user", "submitted_at": "2025-01-20T10:00:00Z", "parts": [
                {"part_kind": "user-prompt", "content": "hi\tthere\nyou"},
                {"part_kind": "text", "content": "y" * 85},
                {"part_kind": "thinking", "content": "abcd"},
                {"part_kind": "tool-call", "tool_name": "rm", "args": {"p": "/"}, "tool_call_id": "c1"},
                {"part_kind": "tool-return", "tool_name": "rm", "status": "error", "content": "denied",
                 "tool_call_id": "c1"},
                {"part_kind": "file", "content": {"media_type": "image/png", "identifier": "cat.png"}},
                {"part_kind": "file"},
                {"part_kind": "retry-prompt", "content": "again"},
                {"content": "no kind"}]},
            {"turn_type": "agent", "agent_id": U, "completion_status": "complete",
             "started_at": "2025-01-20T10:00:01Z", "completed_at": "2025-01-20T10:00:05Z", "messages": [
                 {"message_type": "response", "timestamp": "T1", "usage": {"total_tokens": 15},
                  "parts": [{"part_kind": "text", "content": "ok"}]},
                 {"message_type": "request", "timestamp": "T2", "usage": {"input_tokens": 3}},
                 {"message_type": "system", "timestamp": "T3", "event_type": "compaction", "event_data": {"a": 1}}],
             "interruption": {"interrupted_at": "T4", "reason": "user_cancelled"}},
            {"turn_type": "agent", "agent_id": "x", "started_at": "2025-01-20T10:00:01Z",
             "completed_at": "2025-01-21T10:00:05Z"},
            {"turn_type": "agent", "agent_id": "zz"},
        ],
        "in_progress": {"agent_id": V, "started_at": "2025-01-22T00:00:00Z", "messages": []}}
    assert show("turns", turns) == (
        "thread t1 (Plan a trip): 4 turns\n"
        "├── #1 user 2025-01-20T10:00:00Z\n"
        "│   ├── prompt: hi there you\n"
        f"│   ├── text: {'y' * 79}…\n"
        "│   ├── thinking (4 chars, folded)\n"
        '│   ├── tool call rm({"p":"/"}) [c1]\n'
        "│   ├── tool return rm error: denied [c1]\n"
        "│   ├── file: image/png cat.png\n"
        "│   ├── file: ?\n"
        '│   ├── retry-prompt: {"content":"again"}\n'
        '│   └── ?: {"content":"no kind"}\n'
        "├── #2 agent bot (6c2d3e4f…) [complete] 2025-01-20T10:00:01Z → 10:00:05Z\n"
        "│   ├── T1 response (15 tokens)\n"
        "│   │   └── text: ok\n"
        "│   ├── T2 request\n"
        '│   ├── T3 system compaction: {"a":1}\n'
        "│   └── ⚠ interrupted at T4: user_cancelled\n"
        "├── #3 agent solo [?] 2025-01-20T10:00:01Z → 2025-01-21T10:00:05Z\n"
        "├── #4 agent zz [?] \n"
        "└── in progress: agent bot (7c2d3e4f…) since 2025-01-22T00:00:00Z\n")


def test_turns_of_an_untitled_thread_with_parts_missing_their_fields() -> None:
    d = {"thread_id": "t", "title": None, "turns": [
        {"turn_type": "user", "parts": [{"part_kind": "text"}, {"part_kind": "thinking"},
                                        {"part_kind": "tool-call"}, {"part_kind": "tool-return"},
                                        {"part_kind": "file", "content": {"identifier": "x" * 60}}]},
        {"agent_id": "a", "messages": [{"parts": []}, {"message_type": "system"}], "interruption": "no"},
        {"turn_type": "user"}],
        "in_progress": {"messages": [{"message_type": "response", "timestamp": "T", "usage": None}]}}
    assert show("turns", d) == (
        "thread t: 3 turns\n"
        "├── #1 user \n"
        "│   ├── text: \n"
        "│   ├── thinking (0 chars, folded)\n"
        "│   ├── tool call None({}) [None]\n"
        "│   ├── tool return None : null [None]\n"
        f"│   └── file: ? {'x' * 49}…\n"
        "├── #2 agent a [?] \n"
        "│   ├──  ?\n"
        "│   └──  system None: null\n"
        "├── #3 user \n"
        "└── in progress: agent  since \n"
        "    └── T response\n")


def test_threads_pending_interrupts_and_children() -> None:
    head = {"thread_id": "t", "status": "active", "activity": "active", "title": "x" * 45, "updated_ns": NS,
            "user_turns": 2, "agent_turns": 3, "messages": 4, "version": 5}
    out = show("threads", {"threads": [head, {**head, "thread_id": "u", "status": "deleted", "title": None}],
                           "cursor": None})
    pad = " " * 40
    assert out == (f"thread  activity  title{pad[5:]}  updated            turns  msgs  events\n"
                   f"t       running   {'x' * 39}…  2023-11-14T22:13Z    2/3     4       5\n"
                   f"u       deleted   -{pad[1:]}  2023-11-14T22:13Z    2/3     4       5\n")
    assert show("threads", {"threads": []}) == "no threads\n"
    assert activity({"status": "active"}) == "idle" and activity({"activity": "waiting"}) == "waiting"
    pend = {"tool_call_id": "c1", "tool_name": "rm", "state": "waiting", "kind": None, "turn": 0, "seq": 7}
    assert show("pending", {"pending": [pend], "abandoned": [{**pend, "tool_call_id": "c2", "kind": "approval",
                                                               "turn": 2}]}) == (
        "pending tool calls\ntool call  tool  state    kind  turn  seq\nc1         rm    waiting  -       #1    7\n\n"
        "abandoned\ntool call  tool  state    kind      turn  seq\nc2         rm    waiting  approval    #3    7\n")
    assert show("pending", {"pending": [], "abandoned": None}) == "pending tool calls\n(none)\n"
    fact = {"turn": 1, "seq": 3, "reason": "user_cancelled", "interrupted_at": "T", "source": "cli",
            "tool_call_id": None, "agent_id": "a"}
    assert show("interrupts", {"interrupted": True, "facts": [fact]}) == (
        "interrupted now  yes\n\ninterruptions\nturn  seq  reason          at  source  tool call  agent\n"
        "  #2    3  user_cancelled  T   cli     -          a\n")
    assert show("interrupts", {"interrupted": False}) == "interrupted now  no\n\ninterruptions\n(none)\n"
    assert show("children", ["a", "b"]) == "children\nthread\na\nb\n"
    assert show("children", [{"depth": 1, "thread_id": "a"}, {"depth": 12, "thread_id": "b"}]) == (
        "descendants\ndepth  thread\n    1  a\n   12  b\n")
    assert show("children", []) == "children\n(none)\n"


def test_tree_links_and_search() -> None:
    d = {"thread_id": "r", "head": {"title": "Root", "status": "active", "activity": "idle", "user_turns": 1,
                                    "agent_turns": 2, "updated_ns": NS},
         "children": [{"thread_id": "c", "head": None, "children": [{"thread_id": "r", "seen": True}]},
                      {"thread_id": "d", "head": {"title": None, "status": "deleted", "user_turns": 0,
                                                  "agent_turns": 0, "updated_ns": 0}}]}
    assert show("tree", d) == ("r  Root  idle, 1/2 turns, updated 2023-11-14T22:13:20Z\n├── c\n"
                               "│   └── r  (already shown above)\n└── d  deleted, 0/0 turns, updated -\n")
    assert show("tree", {"thread_id": "z" * 50, "head": {"title": "T" * 50, "user_turns": 0, "agent_turns": 0,
                                                         "updated_ns": 0}}) == (
        f"{'z' * 50}  {'T' * 39}…  idle, 0/0 turns, updated -\n")
    assert show("links", [{"thread_id": "a", "relation": "fork_of"}]) == "thread  relation\na       fork_of\n"
    assert show("links", []) == "no links\n"
    hit = {"thread_id": "t", "head": {"title": None}, "field": "text", "turn": 1, "seq": 4,
           "snippet": "a \ue000hit\ue001 here", "matches": 2}
    assert show("search", {"hits": [hit], "cursor": "C", "behind": 3}) == (
        "thread  title  field  turn/seq  snippet       matches\n"
        "t       -      text        1/4  a [hit] here        2\n\n"
        "next page     --after C\nindex behind  3 log positions\n")
    long = {**hit, "head": {"title": "T" * 31}, "snippet": "s" * 61}
    assert f"{'T' * 29}…  text" in show("search", {"hits": [long]})
    assert f"{'s' * 59}…" in show("search", {"hits": [long]})
    assert show("search", {"hits": [], "behind": 0}) == "no matches\n"
    assert show("search", {"hits": [], "behind": 2}) == "no matches\n\nindex behind  2 log positions\n"
    assert show("search", {"hits": [], "cursor": "C"}) == "no matches\n\nnext page  --after C\n"


def test_stat_verify_rebuild_validate() -> None:
    stat = {"path": "/s", "file_bytes": 2048, "used_bytes": 3 * 1024 * 1024, "map_size": 1024, "page_size": 4096,
            "threads": 2, "events": 9, "last_position": 9, "dictionaries": 1, "num_readers": 1, "max_readers": 126,
            "group_commit": {"commits": 3, "appends": 6, "mean_group": 2.0}, "last_pgno": 5,
            "tables": {"events": {"entries": 9, "pages": 2, "overflow_pages": 1}, "heads": {"entries": 2}}}
    assert show("stat", stat) == (
        "store\npath           /s\nfile           2.0 KB\nused           3.0 MB\nmap size       1.0 KB\n"
        "page size      4.0 KB\nthreads        2\nevents         9\nlast position  9\ndictionaries   1\n"
        "readers        1 of 126\ngroup commits  3 (6 appends, mean group 2.0)\n\n"
        "tables\ntable   entries  pages  overflow     size\nevents        9      2         1  12.0 KB\n"
        "heads         2   None      None      0 B\n")
    out = show("stat", {"tables": {"events": {"entries": 1, "pages": 1, "overflow_pages": 0}}, "page_size": 0})
    assert out.endswith("tables\ntable   entries  pages  overflow  size\nevents        1      1         0     -\n")
    assert "readers        None of None\ngroup commits  None (None appends, mean group None)\n" in out
    assert show("verify", {"ok": False, "threads": 1, "events": 2, "blobs": 0, "problems": ["bad seq", {"k": 1}],
                           "skipped": ["t2"]}) == (
        'ok       no\nthreads  1\nevents   2\nblobs    0\n\nproblems\nproblem\nbad seq\n{"k":1}\n\n'
        "skipped\nskipped\nt2\n")
    assert show("verify", {"ok": True, "threads": 1, "events": 2, "blobs": 0}) == (
        "ok       yes\nthreads  1\nevents   2\nblobs    0\n\nproblems\n(none)\n")
    rows = [{"projection": "heads", "verify": True, "events": 9, "seconds": 0.5, "events_per_second": 18,
             "position": 9},
            {"projection": "state", "verify": False, "events": 9, "seconds": 1, "events_per_second": 9, "position": 9,
             "differences": ["d1", "d2"]}]
    assert show("rebuild", rows) == (
        "projection  verify  events   time  events/s  position  differences\n"
        "heads       yes          9  0.5 s        18         9            0\n"
        "state       no           9    1 s         9         9            2\n\n"
        "differences in state\ndifference\nd1\nd2\n")
    assert show("validate", {"errors": [{"path": "/turns/0", "rule": "R1", "message": "bad"}],
                             "warnings": [{"path": None, "rule": "W", "message": "meh"}]}) == (
        "errors\npath      rule  message\n/turns/0  R1    bad\n\nwarnings\npath  rule  message\n-     W     meh\n")
    assert show("validate", {}) == "errors\n(none)\n\nwarnings\n(none)\n"


def test_import_and_prune() -> None:
    imported = {"thread_id": "t", "title": None, "events": 2, "messages": 1, "user_turns": 1, "agent_turns": 1,
                "first_seq": 3, "last_seq": 4, "first_position": 5, "last_position": 6, "event_ids": []}
    assert show("import", imported) == (
        "imported\nthread         t\ntitle          -\nevents         2\nmessages       1\n"
        "turns          1 user, 1 agent\nseqs           3..4\nlog positions  5..6\n")
    assert show("import", {**imported, "event_ids": ["e1", "e2"]}).endswith(
        "event ids\nseq  event id\n  3  e1\n  4  e2\n")
    report = {"at_ns": None, "dry_run": True, "scope": None, "policy": {"max_threads": 10},
              "removed": [{"thread_id": "a", "why": "too many"}], "report_thread_id": None}
    assert show("prune", report) == (
        "at             -\ndry run        yes\nscope          -\npolicy         max threads 10, keep linked\n"
        "would remove   1\nkept           0\nreport thread  -\n\nwould remove\nthread  last update  why\n"
        "a       -            too many\n")
    assert show("prune", {}) == ("at             -\ndry run        -\nscope          -\npolicy         keep linked\n"
                                 "removed        0\nkept           0\nreport thread  -\n")
    one = {"policy": {"max_age_ns": 1_500_000_000, "max_threads": 0, "keep_if_linked": True}}
    assert "policy         max age 0:00:02, max threads 0, keep linked\n" in show("prune", one)
    assert show("prune-reports", {"reports": [{}]}) == (
        "at  scope  policy       removed  kept  dry run  report thread\n"
        "-   -      keep linked        0     0  -        -\n")


def test_generic_event_lines_sizes_and_times() -> None:
    assert show("whatever", {"a_b": [1, 2], "c": False, "d": "x" * 61}) == (
        f"a b  [1,2]\nc    no\nd    {'x' * 61}\n")
    listed = "[" + ",".join(map(str, range(30))) + "]"
    assert show("whatever", {"e": list(range(30))}) == f"e  {listed[:59]}…\n"
    row = {"seq": 1, "type": "message_recorded", "recorded_at": 1_700_000_000_123_000_000, "thread_id": "t",
           "event": {"message": {"message_type": "response", "parts": [{"part_kind": "text", "content": "hi"},
                                                                       {"part_kind": "thinking", "content": "x"}]}}}
    assert event_line(row) == ("2023-11-14T22:13:20.123Z t #1 message_recorded  response: text: hi; "
                               "thinking (1 chars, folded)")
    assert event_line(row, thread=False).startswith("2023-11-14T22:13:20.123Z #1 message_recorded  response")
    lines = [
        ({"message": {"message_type": "request", "parts": []}}, "- #1 x  request"),
        ({"message": {"message_type": "system", "event_type": "compaction", "event_data": {"a": 1},
                      "parts": [{"part_kind": "text", "content": "hi"}]}}, '- #1 x  system compaction: {"a":1}'),
        ({"message": {"parts": [{"part_kind": "text", "content": "hi"}]}}, "- #1 x  : text: hi"),
        ({"turn": {"parts": [{"part_kind": "user-prompt", "content": "q"}, {"part_kind": "text", "content": "r"}]}},
         "- #1 x  prompt: q; text: r"),
        ({"turn": {"parts": []}}, "- #1 x"),
        ({"agent_id": "a1"}, "- #1 x  agent a1"),
        ({"link": {"relation": "fork_of", "thread_id": "p"}}, "- #1 x  fork_of p"),
        ({"interruption": {"reason": "timeout"}}, "- #1 x  timeout"),
        ({"reason": "gdpr"}, "- #1 x  gdpr"),
        ({}, "- #1 x"),
        ({"message": {"message_type": "response", "parts": [{"part_kind": "text", "content": "z" * 120}]}},
         f"- #1 x  response: text: {'z' * 79}…"),
    ]
    for event, line in lines:
        assert event_line({"seq": 1, "type": "x", "thread_id": "", "event": event}) == line, event
    assert event_line({"seq": 1, "type": "x", "event": {"message": {"message_type": "response", "parts": [
        {"part_kind": "text", "content": "z" * 70}, {"part_kind": "text", "content": "w" * 70}]}}}).endswith(
        "; text: " + "w" * 5 + "…")
    assert [size(n) for n in (None, 1024 * 1023, 1024 * 1024, 1536, 1024**4, 1023 * 1024**3)] == [
        "-", "1023.0 KB", "1.0 MB", "1.5 KB", "1.0 TB", "1023.0 GB"]
    assert iso_ns(1_700_000_000_999_000_000) == "2023-11-14T22:13:20Z"
    assert iso_ns(5, millis=True) == "1970-01-01T00:00:00.000Z"


def test_which_columns_rich_may_wrap_and_which_align_right() -> None:
    """rich wraps only free text (ids, times and numbers never break); plain text shows only alignment."""
    def tables(command: str, data: Any) -> list[tuple[frozenset[str], frozenset[str]]]:
        return [(b.wrap, b.right) for b in render(command, data) if isinstance(b, Table)]

    f = frozenset
    assert tables("threads", {"threads": []}) == [(f({"title"}), f({"turns", "msgs", "events"}))]
    assert tables("interrupts", {}) == [(f({"agent"}), f({"turn", "seq"}))]
    assert tables("verify", {"ok": 1, "threads": 1, "events": 1, "blobs": 1, "skipped": ["x"]}) == [
        (f({"problem"}), f()), (f({"skipped"}), f())]
    assert tables("rebuild", [{"projection": "p", "verify": 1, "events": 1, "seconds": 1, "events_per_second": 1,
                               "position": 1, "differences": ["d"]}])[1] == (f({"difference"}), f())
    assert tables("validate", {}) == [(f({"message"}), f())] * 2
    assert tables("prune", {"removed": [{"thread_id": "a"}], "kept": [{"thread_id": "b"}],
                            "failed": [{"thread_id": "c"}], "dangling": [["d", "a"]]}) == [
        (f({"why"}), f()), (f({"why"}), f()), (f({"why"}), f()), (f(), f())]
    assert tables("prune-reports", {"reports": []}) == [(f({"policy"}), f({"removed", "kept"}))]
    assert tables("search", {"hits": []}) == [(f({"title", "snippet"}), f({"turn/seq", "matches"}))]
    assert tables("x", [{"a": 1, "b": 2}]) == [(f({"a", "b"}), f())]
    assert tables("x", [1]) == [(f({"value"}), f())]
