"""Shared helpers for the Pydantic AI / Vercel integration tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from tplog.events import Event

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_FILES = sorted(FIXTURES.glob("*.json"))


def load_fixture(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    data["events"] = msgspec.json.decode(json.dumps(data["events"]), type=list[Event])
    return data


def fixture_ids() -> list[str]:
    return [p.stem for p in FIXTURE_FILES]
