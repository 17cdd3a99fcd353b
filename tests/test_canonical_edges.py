"""tplog.protocol.canonical at its edges, without Hypothesis: the exact error (class, message, path)
for every value JCS refuses, integers at the limits of the plain notation and of the message's
``str()``, where a lone surrogate is found, which parts and messages ``exclude_noncanonical`` drops
and the hash functions' defaults.

Written for the mutation run of canonical.py (tests/MUTANTS.md): tests/test_canonical.py checks most
of this through properties against the ``rfc8785`` package, which are too slow to run per mutant;
each case here pins the value a mutant would change, fast.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import pytest

from tplog.errors import InvalidInputError
from tplog.protocol.canonical import (
    CanonicalizationError,
    IntegerDomainError,
    NonFiniteNumberError,
    canonical_form,
    canonical_json,
    hash_json,
    thread_hash,
)
from tplog.protocol.json import from_builtins, to_builtins
from tplog.protocol.model import Thread

INT_TAIL = "is outside the JSON safe range ±(2**53-1) and is not how RFC 8785 writes a double"


def refused(obj: Any) -> tuple[type, str, str | None]:
    """(class, message without the path, path) of the error canonical_json raises for ``obj``."""
    with pytest.raises(CanonicalizationError) as info:
        canonical_json(obj)
    err = info.value
    assert isinstance(err, InvalidInputError)
    suffix = f" (at {err.path})"
    text = str(err)
    assert text.endswith(suffix), text
    return type(err), text[: -len(suffix)], err.path


# --------------------------------------------------------------------------- refused values


@pytest.mark.parametrize(
    ("obj", "want"),
    [
        ({"a": [float("nan")]}, (NonFiniteNumberError, "nan is not a JSON number", "$.a[0]")),
        ({"a": float("-inf")}, (NonFiniteNumberError, "-inf is not a JSON number", "$.a")),
        ([0, {1: "x"}], (CanonicalizationError, "Object key 1 is not a string", "$[1][1]")),
        ({"a": b"x"}, (CanonicalizationError, "Unsupported type bytes (not a JSON value)", "$.a")),
        (
            [2**53 + 1],
            (
                IntegerDomainError,
                f"Integer 9007199254740993 {INT_TAIL} (JCS reads it as the nearest double, written 9007199254740992); "
                "write it as a string",
                "$[0]",
            ),
        ),
        (
            10**400,
            (
                IntegerDomainError,
                f"Integer of 1329 bits {INT_TAIL} (it is beyond the range of doubles); write it as a string",
                "$",
            ),
        ),
    ],
)
def test_a_refused_value_is_named_with_its_path_and_why(obj: Any, want: tuple[type, str, str]) -> None:
    assert refused(obj) == want


def test_an_integer_is_shown_in_the_message_up_to_256_bits() -> None:
    nearest = "(JCS reads it as the nearest double, written 1.157920892373162e+77); write it as a string"
    n = 2**256 - 1
    assert n.bit_length() == 256
    assert refused(n) == (IntegerDomainError, f"Integer {n} {INT_TAIL} {nearest}", "$")
    assert refused(2**256) == (IntegerDomainError, f"Integer of 257 bits {INT_TAIL} {nearest}", "$")


def test_an_integer_of_70_bits_that_is_a_doubles_spelling_is_accepted() -> None:
    # 6e20 lies in [2**69, 2**70): the widest integers ES6 still writes in plain notation
    n = 600000000000000000000
    assert n.bit_length() == 70 and float(n) == 6e20
    assert canonical_json([n, -n]) == b"[600000000000000000000,-600000000000000000000]"


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        ({'a\ud800"b': 1, "c": 2}, '$["a\\ud800\\"b"]'),  # escaped as in JSON: the quote and the surrogate
        ({"x": [{"ok": 1, "\udfff": 1}]}, '$.x[0]["\\udfff"]'),
    ],
)
def test_a_key_with_a_lone_surrogate_is_named_escaped(obj: Any, path: str) -> None:
    assert refused(obj) == (
        CanonicalizationError,
        "Object key contains a lone surrogate (not valid Unicode text)",
        path,
    )


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        ("\ud800", "$"),
        ({"ok": ["x", 1, "a\ud800"]}, "$.ok[2]"),
        ({"a": "fine", "b": {"c d": [None, "\udc00"]}}, '$.b["c d"][1]'),
        ([["x"], {"k": "y"}, ["z", {"k": "\ud83d"}]], "$[2][1].k"),  # a lead surrogate without its trail
    ],
)
def test_a_string_with_a_lone_surrogate_is_found_where_it_is(obj: Any, path: str) -> None:
    assert refused(obj) == (CanonicalizationError, "String contains a lone surrogate (not valid Unicode text)", path)


def test_nesting_too_deep_is_refused_at_the_root() -> None:
    deep: Any = "x"
    for _ in range(sys.getrecursionlimit() + 10):
        deep = [deep]
    assert refused(deep) == (CanonicalizationError, "Nesting too deep (or a cyclic structure)", "$")


# --------------------------------------------------------------------------- what is written


def test_empty_containers() -> None:
    assert canonical_json({"a": [], "b": {}, "c": [[], {}]}) == b'{"a":[],"b":{},"c":[[],{}]}'
    assert canonical_json([]) == b"[]" and canonical_json(()) == b"[]"


# --------------------------------------------------------------------------- the thread form and hash


def _doc() -> dict[str, Any]:
    return {
        "version": "0.0.4",
        "thread_id": "550e8400-e29b-41d4-a716-446655440000",
        "created_at": "2025-01-20T10:00:00Z",
        "updated_at": "2025-01-20T10:00:02Z",
        "agents": {"a": {"agent_id": "a", "agent_name": "A", "created_at": "2025-01-20T10:00:00Z"}},
        "turns": [
            {
                "turn_type": "agent",
                "agent_id": "a",
                "started_at": "2025-01-20T10:00:01Z",
                "completion_status": "complete",
                "messages": [
                    {
                        "message_type": "response",
                        "timestamp": "2025-01-20T10:00:02Z",
                        "agent_id": "a",
                        # an unknown field named like a system message's: not a system message
                        "event_type": "data-sys-latency",
                        "parts": [
                            {"part_kind": "meta:trace", "span": 1},
                            {"part_kind": "text", "content": "hi"},
                            {"part_kind": "custom:x", "y": 1},
                        ],
                    }
                ],
            }
        ],
    }


def test_meta_parts_of_a_message_are_dropped_and_a_non_system_message_is_kept() -> None:
    form = canonical_form(from_builtins(_doc(), Thread))
    (msg,) = form["turns"][0]["messages"]
    assert msg["event_type"] == "data-sys-latency"
    assert msg["parts"] == [{"part_kind": "text", "content": "hi"}, {"part_kind": "custom:x", "y": 1}]


def test_the_hashes_exclude_noncanonical_content_by_default() -> None:
    thread = from_builtins(_doc(), Thread)
    data = json.dumps(_doc())
    excluded = "sha256:" + hashlib.sha256(canonical_json(canonical_form(thread))).hexdigest()
    full = "sha256:" + hashlib.sha256(canonical_json(to_builtins(thread))).hexdigest()
    assert excluded != full
    assert thread_hash(thread) == thread_hash(thread, exclude_noncanonical=True) == excluded
    assert thread_hash(thread, exclude_noncanonical=False) == full
    assert hash_json(data) == hash_json(data, exclude_noncanonical=True) == excluded
    assert hash_json(data, exclude_noncanonical=False) == full


def test_canonical_form_names_what_it_got_instead_of_a_thread() -> None:
    with pytest.raises(TypeError) as info:
        canonical_form(_doc())  # type: ignore[arg-type]
    assert str(info.value) == "canonical_form() needs a tplog.Thread, not dict"
