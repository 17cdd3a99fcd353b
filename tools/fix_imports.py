"""Rewrite references to tplog's old private module paths to the public layout.

    python tools/fix_imports.py FILE_OR_DIR...

Rewrites in place ``tplog.protocol.model`` → ``tplog.protocol.model`` (dotted names, imports,
``mock.patch`` strings), ``from tplog.protocol import model as m`` → ``from tplog.protocol import
model as m``, ``from tplog.protocol import validate as _validate`` → ``from tplog.protocol import validate as
_validate`` and ``tplog/protocol/model.py`` → ``tplog/protocol/model.py`` (paths in docs); prints the
files it changed. Meant for branches written against the old layout (issue 19, phase 3).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MOVES = {
    "_model": "protocol.model",
    "_json": "protocol.json",
    "_validate": "protocol.validate",
    "_canonical": "protocol.canonical",
    "_versions": "protocol.versions",
    "_rules": "protocol.rules",
    "_errors": "errors",
    "_events": "events",
    "_store": "store",
    "_cli": "cli",
    "_fold": "projections.fold",
    "_codec": "codec",
    "_verify": "verify",
}
_NAMES = "|".join(MOVES)
_DOTTED = re.compile(rf"\btplog\.({_NAMES})\b")
_PATH = re.compile(rf"\btplog/({_NAMES})\.py\b")
_FROM_AS = re.compile(rf"\bfrom tplog import ({_NAMES})\b( as \w+)")
_FROM = re.compile(rf"\bfrom tplog import ({_NAMES})\b(?! as )")


def _from(old: str, alias: str) -> str:
    parent, _, leaf = ("tplog." + MOVES[old]).rpartition(".")
    return f"from {parent} import {leaf}{alias}"


def rewrite(text: str) -> str:
    text = _FROM_AS.sub(lambda mo: _from(mo[1], mo[2]), text)
    text = _FROM.sub(lambda mo: _from(mo[1], f" as {mo[1]}"), text)
    text = _DOTTED.sub(lambda mo: "tplog." + MOVES[mo[1]], text)
    return _PATH.sub(lambda mo: "tplog/" + MOVES[mo[1]].replace(".", "/") + ".py", text)


def main(argv: list[str]) -> int:
    suffixes = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".yml", ".yaml"}
    for arg in argv:
        root = Path(arg)
        files = [root] if root.is_file() else [p for p in sorted(root.rglob("*")) if p.suffix in suffixes
                                               and ".venv" not in p.parts and ".git" not in p.parts]
        for path in files:
            old = path.read_text()
            new = rewrite(old)
            if new != old:
                path.write_text(new)
                print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
