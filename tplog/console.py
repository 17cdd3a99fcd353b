"""Terminal output for the CLI: is a stream a terminal, blocks (tables, trees, key/value lists)
printed through rich (the ``cli`` extra) or as plain text without it, and a progress bar on stderr.

Nothing here decides *what* a command shows (that is :mod:`tplog.render`); this module only
knows how to put tables, trees and progress on a terminal. rich is imported lazily and is
optional: without it every block prints as aligned plain text and progress prints nothing.

Everything printed here passes :func:`clean` first: stored text (titles, prompts, tool
arguments) comes from chat users, and a terminal obeys the control characters in it.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

__all__ = ["Block", "KeyValues", "Table", "Tree", "clean", "has_rich", "is_terminal", "print_blocks", "print_line",
           "progress"]

# C0 controls (ESC starts every escape sequence), DEL, C1 (\x9b is a one-byte CSI) and the bidi
# controls that reorder what follows (U+202E shows "txt.exe" as "exe.txt")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """``text`` safe for a terminal: each control character shown as its escape (``\\x1b``,
    ``\\u202e``), so it is seen, not obeyed; newline, tab and carriage return become spaces
    (every field a view prints is one line: a title's newline must not break a table)."""
    def sub(mt: re.Match[str]) -> str:
        c = mt.group()
        if c in "\n\t\r":
            return " "
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return _CONTROL.sub(sub, text)


def is_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` is a terminal (a person reads it); a pipe or file gets JSON."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def has_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------- blocks


@dataclass
class Table:
    """Rows under column headers; ``justify`` per column ("left" or "right")."""

    title: str | None
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    right: frozenset[str] = frozenset()  # columns aligned right (numbers, sizes)
    empty: str = "(none)"
    wrap: frozenset[str] = frozenset()  # free-text columns that may wrap; the others (ids, times, numbers) do not


@dataclass
class KeyValues:
    """A titled list of ``name: value`` lines."""

    title: str | None
    items: list[tuple[str, str]]


@dataclass
class Tree:
    """A label with child trees (a thread's turns and messages, a thread's descendants)."""

    label: str
    children: list[Tree] = field(default_factory=list)

    def add(self, label: str) -> Tree:
        node = Tree(label)
        self.children.append(node)
        return node


Block = Table | KeyValues | Tree


def _cleaned(b: Block) -> Block:
    if isinstance(b, Table):
        return Table(None if b.title is None else clean(b.title), [clean(c) for c in b.columns],
                     [[clean(str(v)) for v in r] for r in b.rows], right=frozenset(clean(c) for c in b.right),
                     empty=clean(b.empty), wrap=frozenset(clean(c) for c in b.wrap))
    if isinstance(b, KeyValues):
        return KeyValues(None if b.title is None else clean(b.title), [(clean(k), clean(v)) for k, v in b.items])
    return _cleaned_tree(b)


def _cleaned_tree(t: Tree) -> Tree:
    return Tree(clean(t.label), [_cleaned_tree(c) for c in t.children])


def print_blocks(blocks: Sequence[Block], stream: IO[str] | None = None) -> None:
    """Print ``blocks`` to ``stream`` (stdout): through rich when it is installed, else plain text."""
    out = sys.stdout if stream is None else stream
    blocks = [_cleaned(b) for b in blocks]  # the one place terminal output is made safe
    if has_rich():
        _print_rich(blocks, out)
    else:
        out.write(plain_text(blocks))


def print_line(text: str, stream: IO[str] | None = None) -> None:
    """One line of text for a person (an event of ``tplog tail``), made safe as blocks are."""
    out = sys.stdout if stream is None else stream
    out.write(clean(text) + "\n")


def _console(stream: IO[str], **kw: Any) -> Any:
    from rich.console import Console

    # highlight=False: rich would colour numbers and ids inside cell text by guesswork
    return Console(file=stream, highlight=False, **kw)


def _print_rich(blocks: Sequence[Block], stream: IO[str]) -> None:
    from rich import box
    from rich.table import Table as RTable
    from rich.text import Text
    from rich.tree import Tree as RTree

    con = _console(stream, force_terminal=is_terminal(stream) or None)
    for i, b in enumerate(blocks):
        if i:
            con.print()
        if isinstance(b, Table):
            if not b.rows:
                if b.title:
                    con.print(Text(b.title, style="bold"))
                con.print(Text(b.empty, style="dim"))
                continue
            # one space between columns (the box's divider, no padding): a thread table fits 100 columns
            # titles as Text: a str would be read as rich markup ("[red]" in a projection name)
            t = RTable(title=_text(b.title), title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                       header_style="bold", padding=0, pad_edge=False, show_edge=False)
            for i, c in enumerate(b.columns):
                # ids, times and numbers keep their width; only free-text columns wrap
                keep = None if c in b.wrap else max(len(c), *(len(str(r[i])) for r in b.rows))
                t.add_column(Text(c), justify="right" if c in b.right else "left", min_width=keep, overflow="fold")
            for row in b.rows:
                t.add_row(*(Text(str(v)) for v in row))
            con.print(t)
        elif isinstance(b, KeyValues):
            t = RTable(title=_text(b.title), title_justify="left", title_style="bold", box=None, show_header=False,
                       padding=(0, 2, 0, 0))
            t.add_column(style="bold")
            t.add_column(overflow="fold")
            for k, v in b.items:
                t.add_row(Text(k), Text(v))
            con.print(t)
        else:
            def build(node: Tree, into: Any) -> None:
                for c in node.children:
                    build(c, into.add(Text(c.label)))

            root = RTree(Text(b.label, style="bold"))
            build(b, root)
            con.print(root)


def _text(title: str | None) -> Any:
    from rich.text import Text

    return None if title is None else Text(title)


def plain_text(blocks: Sequence[Block]) -> str:
    """The blocks as aligned plain text (no rich): what a terminal shows without the cli extra."""
    parts: list[str] = []
    for b in blocks:
        lines: list[str] = []
        if isinstance(b, Table):
            if b.title:
                lines.append(b.title)
            if not b.rows:
                lines.append(b.empty)
            else:
                cells = [list(b.columns), *([str(v) for v in r] for r in b.rows)]
                widths = [max(len(r[i]) for r in cells) for i in range(len(b.columns))]
                for r in cells:
                    lines.append("  ".join(v.rjust(w) if c in b.right else v.ljust(w)
                                           for v, w, c in zip(r, widths, b.columns, strict=True)).rstrip())
        elif isinstance(b, KeyValues):
            if b.title:
                lines.append(b.title)
            width = max((len(k) for k, _ in b.items), default=0)
            lines.extend(f"{k.ljust(width)}  {v}" for k, v in b.items)
        else:
            lines.append(b.label)
            lines += _tree_lines(b, "")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def _tree_lines(node: Tree, prefix: str) -> list[str]:
    out: list[str] = []
    for i, c in enumerate(node.children):
        last = i == len(node.children) - 1
        out.append(f"{prefix}{'└── ' if last else '├── '}{c.label}")
        out += _tree_lines(c, prefix + ("    " if last else "│   "))
    return out


# --------------------------------------------------------------------------- progress

#: ``update(description, done, total)``: report progress of one named task (total may be None).
ProgressFn = Callable[[str, int, "int | None"], None]


@contextlib.contextmanager
def progress(stream: IO[str] | None = None) -> Iterator[ProgressFn]:
    """A progress reporter for long work (import, rebuild, verify, prune, copy).

    Yields ``update(description, done, total)``; each distinct description is one bar. The bars
    are drawn on ``stream`` (stderr) only when it is a terminal and rich is installed; otherwise
    ``update`` does nothing, so callers report unconditionally. The bars vanish when done
    (``transient``): the command's result on stdout is what stays.
    """
    err = sys.stderr if stream is None else stream
    if not is_terminal(err) or not has_rich():
        if is_terminal(err):
            err.write("tplog: no progress bar without rich: pip install 'tplog[cli]'\n")
        yield lambda _desc, _done, _total: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=_console(err), transient=True) as bar:
        tasks: dict[str, Any] = {}

        def update(desc: str, done: int, total: int | None) -> None:
            if desc not in tasks:
                tasks[desc] = bar.add_task(desc, total=total)
            bar.update(tasks[desc], completed=done, total=total)

        yield update
