"""What each CLI command shows a person: its JSON result (the very data ``--json`` prints)
turned into tables, trees and key/value lists (:mod:`tplog.console` prints them).

Times become ISO 8601 (UTC), sizes KB/MB, long text is cut to one line. A command without a
renderer of its own shows its result generically (an object as key/value lines, a list of
objects as a table), so every command reads on a terminal.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import msgspec

from tplog.console import Block, KeyValues, Table, Tree

__all__ = ["event_line", "iso_ns", "render", "size"]

_json = msgspec.json.Encoder()


# --------------------------------------------------------------------------- formatting


def iso_ns(ns: int | None, *, millis: bool = False) -> str:
    """Nanoseconds since the epoch as ISO 8601 UTC, to the second or millisecond ('-' for none)."""
    if not ns:
        return "-"
    t = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{t.microsecond // 1000:03d}Z" if millis else "Z")


def _minute(ns: int) -> str:
    """ISO 8601 UTC to the minute (a listing's column): 2025-01-20T10:00Z."""
    t = iso_ns(ns)
    return t[:16] + "Z" if len(t) > 16 else t


def size(n: int | None) -> str:
    """A byte count for people: B below 1 KB, then KB, MB, GB (powers of 1024, one decimal)."""
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    for unit in ("KB", "MB", "GB", "TB"):
        n_f = n / 1024
        if n_f < 1024 or unit == "TB":
            return f"{n_f:.1f} {unit}"
        n = int(n_f)
    return f"{n} B"  # pragma: no cover - the loop returns


def _short(value: Any, width: int = 80) -> str:
    """Any value on one line, cut to ``width`` characters."""
    text = value if isinstance(value, str) else _json.encode(value).decode()
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return v if isinstance(v, str) else _short(v, 60)


# --------------------------------------------------------------------------- commands


#: A head's ``activity`` as the CLI names it (``tplog threads --activity``): "active" there means an agent
#: turn is open, which is easy to read as the thread ``status`` "active" (not deleted) every live thread has.
ACTIVITY_NAMES = {"active": "running"}


def activity(head: dict[str, Any]) -> str:
    """What a thread is doing, as ``tplog threads`` shows and ``--activity`` filters it ("deleted": a tombstone)."""
    if head.get("status") == "deleted":
        return "deleted"
    a = str(head.get("activity", "idle"))
    return ACTIVITY_NAMES.get(a, a)


def _threads(d: dict[str, Any]) -> list[Block]:
    # the columns a thread is found by; its links and size are in `tplog links` / the JSON (a row fits 100 columns)
    rows = [[t["thread_id"], activity(t), _short(t.get("title") or "-", 40), _minute(t["updated_ns"]),
             f"{t['user_turns']}/{t['agent_turns']}", str(t["messages"]), str(t["version"])] for t in d["threads"]]
    cols = ["thread", "activity", "title", "updated", "turns", "msgs", "events"]
    blocks: list[Block] = [Table(None, cols, rows, right=frozenset({"turns", "msgs", "events"}),
                                 empty="no threads", wrap=frozenset({"title"}))]
    if d.get("cursor"):
        blocks.append(KeyValues(None, [("next page", f"--after {d['cursor']}")]))  # the option that takes it
    return blocks


def _part_label(p: dict[str, Any]) -> str:
    kind = p.get("part_kind", "?")
    if kind in ("text", "user-prompt"):
        return f"{'text' if kind == 'text' else 'prompt'}: {_short(p.get('content', ''))}"
    if kind == "thinking":
        return f"thinking ({len(str(p.get('content', '')))} chars, folded)"
    if kind == "tool-call":
        return f"tool call {p.get('tool_name')}({_short(p.get('args', {}), 60)}) [{p.get('tool_call_id')}]"
    if kind == "tool-return":
        status = p.get("status", "")
        return f"tool return {p.get('tool_name')} {status}: {_short(p.get('content'), 60)} [{p.get('tool_call_id')}]"
    if kind == "file":  # a FilePart: its media type and name are in its content (BinaryContent)
        c = p.get("content") or {}
        return f"file: {c.get('media_type', '?')} {_short(c.get('identifier') or '', 50)}".rstrip()
    return f"{kind}: {_short({k: v for k, v in p.items() if k != 'part_kind'}, 70)}"


def _agent(agent_id: str, names: dict[str, str]) -> str:
    """An agent in a turn's line: its registered name (with its id's first 8 hex digits when two
    agents share it), else the id (a UUID by its first 8 hex digits)."""
    short = agent_id[:8] + "…" if len(agent_id) == 36 and agent_id[8] == "-" else agent_id
    name = names.get(agent_id)
    if name is None:
        return short
    return f"{name} ({short})" if list(names.values()).count(name) > 1 else name


def _agent_turn(node: Tree, t: dict[str, Any]) -> None:
    for msg in t.get("messages", []):
        mtype = msg.get("message_type", "?")
        if mtype == "system":
            node.add(f"{msg.get('timestamp', '')} system {msg.get('event_type')}: {_short(msg.get('event_data'), 60)}")
            continue
        usage = msg.get("usage")
        tokens = f" ({usage.get('total_tokens')} tokens)" if isinstance(usage, dict) and "total_tokens" in usage else ""
        m = node.add(f"{msg.get('timestamp', '')} {mtype}{tokens}")
        for p in msg.get("parts", []):
            m.add(_part_label(p))
    intr = t.get("interruption")
    if isinstance(intr, dict):
        node.add(f"⚠ interrupted at {intr.get('interrupted_at')}: {intr.get('reason')}")


def _turns(d: dict[str, Any]) -> list[Block]:
    names = d.get("agents") or {}
    title = f" ({_short(d['title'], 60)})" if d.get("title") else ""
    root = Tree(f"thread {d['thread_id']}{title}: {len(d['turns'])} turns")
    for i, t in enumerate(d["turns"], 1):
        if t.get("turn_type") == "user":
            node = root.add(f"#{i} user {t.get('submitted_at', '')}")
            for p in t.get("parts", []):
                node.add(_part_label(p))
        else:
            status = t.get("completion_status", "?")
            start, end = t.get("started_at", ""), t.get("completed_at") or ""
            if end:  # the end's date is the start's, mostly: show its time only then
                end = " → " + (end.partition("T")[2] if end[:10] == start[:10] else end)
            node = root.add(f"#{i} agent {_agent(t.get('agent_id', ''), names)} [{status}] {start}{end}")
            _agent_turn(node, t)
    ip = d.get("in_progress")
    if isinstance(ip, dict):
        node = root.add(f"in progress: agent {_agent(ip.get('agent_id', ''), names)} since {ip.get('started_at', '')}")
        _agent_turn(node, ip)
    return [root]


def _turn_no(index: int) -> str:
    """A turn index (0-based in the JSON) numbered as ``tplog turns`` numbers it: #1 is the first."""
    return f"#{index + 1}"


def _pending(d: dict[str, Any]) -> list[Block]:
    cols = ["tool call", "tool", "state", "kind", "turn", "seq"]
    rows = [[p["tool_call_id"], p["tool_name"], p["state"], _cell(p.get("kind")), _turn_no(p["turn"]), str(p["seq"])]
            for p in d["pending"]]
    blocks: list[Block] = [Table("pending tool calls", cols, rows, right=frozenset({"turn", "seq"}))]
    ab = d.get("abandoned") or []
    if ab:
        blocks.append(Table("abandoned", cols, [[p["tool_call_id"], p["tool_name"], p["state"], _cell(p.get("kind")),
                                                 _turn_no(p["turn"]), str(p["seq"])] for p in ab],
                            right=frozenset({"turn", "seq"})))
    return blocks


def _interrupts(d: dict[str, Any]) -> list[Block]:
    blocks: list[Block] = [KeyValues(None, [("interrupted now", _cell(d.get("interrupted")))])]
    cols = ["turn", "seq", "reason", "at", "source", "tool call", "agent"]
    rows = [[_turn_no(f["turn"]), str(f["seq"]), _cell(f.get("reason")), _cell(f.get("interrupted_at")),
             _cell(f.get("source")), _cell(f.get("tool_call_id")), _cell(f.get("agent_id"))]
            for f in d.get("facts") or []]
    blocks.append(Table("interruptions", cols, rows, right=frozenset({"turn", "seq"}), wrap=frozenset({"agent"})))
    return blocks


def _children(d: Any) -> list[Block]:
    if d and isinstance(d[0], dict):  # --recursive: (thread, depth) rows, breadth-first
        return [Table("descendants", ["depth", "thread"], [[str(r["depth"]), r["thread_id"]] for r in d],
                      right=frozenset({"depth"}))]
    return [Table("children", ["thread"], [[c] for c in d])]


def _tree(d: dict[str, Any]) -> list[Block]:
    def label(n: dict[str, Any]) -> str:
        info = n.get("head")
        text = str(n["thread_id"])
        if isinstance(info, dict):
            title = f"  {_short(info['title'], 40)}" if info.get("title") else ""
            text += (f"{title}  {activity(info)}, {info['user_turns']}/{info['agent_turns']} turns, "
                     f"updated {iso_ns(info['updated_ns'])}")
        if n.get("seen"):
            text += "  (already shown above)"
        return text

    def build(n: dict[str, Any], into: Tree) -> None:
        for c in n.get("children", []):
            build(c, into.add(label(c)))

    root = Tree(label(d))
    build(d, root)
    return [root]


def _links(d: Any) -> list[Block]:
    return [Table(None, ["thread", "relation"], [[r["thread_id"], r["relation"]] for r in d], empty="no links")]


def _stat(d: dict[str, Any]) -> list[Block]:
    gc = d.get("group_commit") or {}
    items = [("path", str(d.get("path"))), ("file", size(d.get("file_bytes"))), ("used", size(d.get("used_bytes"))),
             ("map size", size(d.get("map_size"))), ("page size", size(d.get("page_size"))),
             ("threads", str(d.get("threads"))), ("events", str(d.get("events"))),
             ("last position", str(d.get("last_position"))), ("dictionaries", str(d.get("dictionaries"))),
             ("readers", f"{d.get('num_readers')} of {d.get('max_readers')}"),
             ("group commits", f"{gc.get('commits')} ({gc.get('appends')} appends, mean group "
                               f"{gc.get('mean_group')})")]
    known = {"path", "file_bytes", "used_bytes", "map_size", "page_size", "threads", "events", "last_position",
             "dictionaries", "num_readers", "max_readers", "group_commit", "tables", "last_pgno"}
    items += [(k.replace("_", " "), _cell(v)) for k, v in d.items() if k not in known]
    blocks: list[Block] = [KeyValues("store", items)]
    tables = d.get("tables") or {}
    if tables:
        page = d.get("page_size") or 0
        rows = [[name, str(t.get("entries")), str(t.get("pages")), str(t.get("overflow_pages")),
                 size((t.get("pages", 0) + t.get("overflow_pages", 0)) * page) if page else "-"]
                for name, t in tables.items()]
        blocks.append(Table("tables", ["table", "entries", "pages", "overflow", "size"], rows,
                            right=frozenset({"entries", "pages", "overflow", "size"})))
    return blocks


def _verify(d: dict[str, Any]) -> list[Block]:
    blocks: list[Block] = [KeyValues(None, [("ok", _cell(d["ok"])), ("threads", str(d["threads"])),
                                            ("events", str(d["events"])), ("blobs", str(d["blobs"]))])]
    blocks.append(Table("problems", ["problem"], [[_cell(p)] for p in d.get("problems") or []],
                        wrap=frozenset({"problem"})))
    if d.get("skipped"):
        blocks.append(Table("skipped", ["skipped"], [[_cell(p)] for p in d["skipped"]], wrap=frozenset({"skipped"})))
    return blocks


def _rebuild(d: Any) -> list[Block]:
    rows = [[r["projection"], _cell(r["verify"]), str(r["events"]), f"{r['seconds']} s", str(r["events_per_second"]),
             str(r["position"]), str(len(r.get("differences") or []))] for r in d]
    blocks: list[Block] = [Table(None, ["projection", "verify", "events", "time", "events/s", "position",
                                        "differences"], rows,
                                 right=frozenset({"events", "time", "events/s", "position", "differences"}))]
    for r in d:
        if r.get("differences"):
            blocks.append(Table(f"differences in {r['projection']}", ["difference"],
                                [[_cell(x)] for x in r["differences"]], wrap=frozenset({"difference"})))
    return blocks


def _validate(d: dict[str, Any]) -> list[Block]:
    def rows(items: list[dict[str, Any]]) -> list[list[str]]:  # Finding objects: rule, path, message
        return [[_cell(i.get("path")), _cell(i.get("rule")), _cell(i.get("message"))] for i in items]

    cols = ["path", "rule", "message"]
    return [Table("errors", cols, rows(d.get("errors") or []), wrap=frozenset({"message"})),
            Table("warnings", cols, rows(d.get("warnings") or []), wrap=frozenset({"message"}))]


def _import(d: dict[str, Any]) -> list[Block]:
    items = [("thread", d["thread_id"]), ("title", _cell(d.get("title"))), ("events", str(d["events"])),
             ("messages", str(d["messages"])), ("turns", f"{d['user_turns']} user, {d['agent_turns']} agent"),
             ("seqs", f"{d['first_seq']}..{d['last_seq']}"), ("log positions", f"{d['first_position']}.."
                                                                              f"{d['last_position']}")]
    blocks: list[Block] = [KeyValues("imported", items)]
    if d.get("event_ids"):
        blocks.append(Table("event ids", ["seq", "event id"], [[str(d["first_seq"] + i), e]
                                                               for i, e in enumerate(d["event_ids"])],
                            right=frozenset({"seq"})))
    return blocks


def _policy(p: dict[str, Any]) -> str:
    parts = []
    if p.get("max_age_ns") is not None:
        parts.append(f"max age {dt.timedelta(seconds=round(p['max_age_ns'] / 1e9))}")
    if p.get("max_threads") is not None:
        parts.append(f"max threads {p['max_threads']}")
    parts.append("keep linked" if p.get("keep_if_linked", True) else "linked ones too")
    return ", ".join(parts)


def _prune_report(r: dict[str, Any], title: str | None) -> list[Block]:
    what = "would remove" if r.get("dry_run") else "removed"
    items = [("at", iso_ns(r.get("at_ns"))), ("dry run", _cell(r.get("dry_run"))), ("scope", _cell(r.get("scope"))),
             ("policy", _policy(r.get("policy") or {})), (what, str(len(r.get("removed") or []))),
             ("kept", str(len(r.get("kept") or []))), ("report thread", _cell(r.get("report_thread_id")))]
    blocks: list[Block] = [KeyValues(title, items)]
    if r.get("removed"):
        blocks.append(Table(what, ["thread", "last update", "why"],
                            [[x["thread_id"], iso_ns(x.get("updated_ns")), _cell(x.get("why"))] for x in r["removed"]],
                            wrap=frozenset({"why"})))
    for key, name in (("kept", "kept"), ("failed", "failed")):
        if r.get(key):
            blocks.append(Table(name, ["thread", "why"], [[x["thread_id"], _cell(x.get("why"))] for x in r[key]],
                                wrap=frozenset({"why"})))
    if r.get("dangling"):
        blocks.append(Table("left dangling", ["child", "removed parent"], [list(x) for x in r["dangling"]]))
    return blocks


def _prune(d: dict[str, Any]) -> list[Block]:
    return _prune_report(d, None)


def _prune_reports(d: dict[str, Any]) -> list[Block]:
    rows = [[iso_ns(r.get("at_ns")), _cell(r.get("scope")), _policy(r.get("policy") or {}),
             str(len(r.get("removed") or [])), str(len(r.get("kept") or [])), _cell(r.get("dry_run")),
             _cell(r.get("report_thread_id"))] for r in d["reports"]]
    blocks: list[Block] = [Table(None, ["at", "scope", "policy", "removed", "kept", "dry run", "report thread"],
                                 rows, right=frozenset({"removed", "kept"}), empty="no prune reports",
                                 wrap=frozenset({"policy"}))]
    if d.get("cursor"):
        blocks.append(KeyValues(None, [("next page", f"--after {d['cursor']}")]))
    return blocks


def _search(d: dict[str, Any]) -> list[Block]:
    # the snippet's highlight markers (tplog.search.MARK_START / MARK_END) as brackets on a terminal
    def snip(t: str) -> str:
        return _short(t.replace("\ue000", "[").replace("\ue001", "]"), 60)

    rows = [[h["thread_id"], _short(h["head"].get("title") or "-", 30), h["field"], f"{h['turn']}/{h['seq']}",
             snip(h["snippet"]), str(h["matches"])] for h in d["hits"]]
    blocks: list[Block] = [Table(None, ["thread", "title", "field", "turn/seq", "snippet", "matches"], rows,
                                 right=frozenset({"turn/seq", "matches"}), empty="no matches",
                                 wrap=frozenset({"title", "snippet"}))]
    extra = ([("next page", f"--after {d['cursor']}")] if d.get("cursor") else []) + (
        [("index behind", f"{d['behind']} log positions")] if d.get("behind") else [])
    if extra:
        blocks.append(KeyValues(None, extra))
    return blocks


def generic(d: Any) -> list[Block]:
    """Any JSON result: an object as key/value lines, a list of objects as a table, else one value a line."""
    if isinstance(d, dict):
        return [KeyValues(None, [(k.replace("_", " "), _cell(v)) for k, v in d.items()])]
    if isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
        cols = list(dict.fromkeys(k for x in d for k in x))
        return [Table(None, cols, [[_cell(x.get(c)) for c in cols] for x in d], wrap=frozenset(cols))]
    if isinstance(d, list):
        return [Table(None, ["value"], [[_cell(x)] for x in d], wrap=frozenset({"value"}))]
    return [KeyValues(None, [("value", _cell(d))])]


_RENDERERS: dict[str, Callable[[Any], list[Block]]] = {
    "threads": _threads, "turns": _turns, "pending": _pending, "interrupts": _interrupts, "children": _children,
    "tree": _tree, "links": _links, "stat": _stat, "verify": _verify, "rebuild": _rebuild, "validate": _validate,
    "import": _import, "prune": _prune, "prune-reports": _prune_reports, "search": _search,
}


def render(command: str, data: Any) -> list[Block]:
    """The blocks a person sees for ``command``'s JSON-shaped result ``data``."""
    return _RENDERERS.get(command, generic)(data)


def event_line(row: dict[str, Any], *, thread: bool = True) -> str:
    """One history event (a ``tplog read`` / ``tplog tail`` JSON line) as one line of text."""
    ev = row.get("event") or {}
    what = ""
    msg = ev.get("message")
    if isinstance(msg, dict):
        parts = msg.get("parts") or []
        what = msg.get("message_type", "") + (": " + "; ".join(_part_label(p) for p in parts) if parts else "")
        if msg.get("message_type") == "system":
            what = f"system {msg.get('event_type')}: {_short(msg.get('event_data'), 60)}"
    elif isinstance(ev.get("turn"), dict) and ev["turn"].get("parts"):  # a user turn
        what = "; ".join(_part_label(p) for p in ev["turn"]["parts"])
    elif isinstance(ev.get("agent"), dict):  # AgentRegistered: the name it goes by from now on
        what = f"agent {ev['agent'].get('agent_name')} ({ev['agent'].get('agent_id')})"
    elif ev.get("agent_id"):
        what = f"agent {ev['agent_id']}"
    elif "link" in ev and isinstance(ev["link"], dict):
        what = f"{ev['link'].get('relation')} {ev['link'].get('thread_id')}"
    elif isinstance(ev.get("interruption"), dict):
        what = str(ev["interruption"].get("reason"))
    elif ev.get("reason"):  # a tombstone's
        what = str(ev["reason"])
    where = f"{row.get('thread_id')} " if thread and row.get("thread_id") else ""
    head = f"{iso_ns(row.get('recorded_at'), millis=True)} {where}#{row.get('seq')} {row.get('type')}"
    return f"{head}  {_short(what, 100)}" if what else head
