"""tplog.protocol.canonical: RFC 8785 canonical JSON (checked against the ``rfc8785`` package) and the thread hash.

Then canonical.py at its edges, without Hypothesis: the exact error (class, message, path) for every
value JCS refuses, integers at the limits of the plain notation and of the message's ``str()``,
where a lone surrogate is found, which parts and messages ``exclude_noncanonical`` drops and the
hash functions' defaults. Written for the mutation run of canonical.py (tests/MUTANTS.md): the
properties above check most of this against the ``rfc8785`` package, but are too slow to run per
mutant; each case below pins the value a mutant would change, fast.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
import re
import struct
import sys
from collections.abc import Callable
from typing import Any

import pytest
import rfc8785
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import THREAD_SETTINGS, json_values, threads

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
from tplog.protocol.json import from_builtins, to_builtins, to_json
from tplog.protocol.model import Thread

MAX_SAFE = 2**53 - 1


def _bits(h: str) -> float:
    return float(struct.unpack(">d", bytes.fromhex(h))[0])


def _double_texts_as_floats(obj: Any) -> Any:
    """``obj`` with every int beyond ±(2**53-1) that is exactly rfc8785's text of a double made that double.

    rfc8785 refuses all such ints; canonical_json accepts these (a JSON parser gives ``1e16``, written
    ``10000000000000000``, back as an int), so they are compared as the double they denote.
    """
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, int) and abs(obj) > MAX_SAFE and obj.bit_length() <= 1000:
        return float(obj) if rfc8785.dumps(float(obj)) == str(obj).encode() else obj
    if isinstance(obj, dict):
        return {k: _double_texts_as_floats(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_double_texts_as_floats(v) for v in obj]
    return obj


def _same_outcome(obj: Any) -> bytes | None:
    """Assert ours and rfc8785 agree: same bytes, or both refuse. Returns the bytes."""
    try:
        expected = rfc8785.dumps(_double_texts_as_floats(obj))
    except (rfc8785.CanonicalizationError, UnicodeEncodeError):
        with pytest.raises(CanonicalizationError):
            canonical_json(obj)
        return None
    assert canonical_json(obj) == expected
    return expected


# --------------------------------------------------------------------------- numbers

# RFC 8785 Appendix B: IEEE 754 bit pattern -> ES6 serialization.
RFC8785_NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "text"), RFC8785_NUMBERS)
def test_rfc8785_appendix_b_numbers(bits: str, text: str) -> None:
    f = _bits(bits)
    assert canonical_json(f) == text.encode()
    assert rfc8785.dumps(f) == text.encode()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        (100.0, "100"),
        (-0.0, "0"),
        (1e20, "100000000000000000000"),
        (1e-6, "0.000001"),
        (0.1, "0.1"),
        (-1.5, "-1.5"),
        (2.0**60, "1152921504606847000"),
        (1.0, "1"),
        (123e-20, "1.23e-18"),
        (4.35, "4.35"),
        (0.0001, "0.0001"),
    ],
)
def test_es6_number_examples(value: float, text: str) -> None:
    assert canonical_json(value) == text.encode()


@given(st.floats(allow_nan=False, allow_infinity=False))
@example(5e-324)
@example(2.2250738585072014e-308)
@example(1e-7)
@example(1e21)
@example(1e300)
def test_floats_match_rfc8785(f: float) -> None:
    assert canonical_json(f) == rfc8785.dumps(f)
    assert float(canonical_json(f)) == f  # round-trips to the same double


@given(st.integers(0, 2**64 - 1))
def test_any_double_bit_pattern_matches_rfc8785(bits: int) -> None:
    f = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    if math.isfinite(f):
        assert canonical_json([f]) == rfc8785.dumps([f])
    else:
        with pytest.raises(rfc8785.FloatDomainError):
            rfc8785.dumps([f])
        with pytest.raises(NonFiniteNumberError) as info:
            canonical_json([f])
        assert info.value.path == "$[0]"


@given(st.floats(min_value=-2.2250738585072014e-308, max_value=2.2250738585072014e-308))
def test_subnormals_match_rfc8785(f: float) -> None:
    assert canonical_json(f) == rfc8785.dumps(f)


@given(st.integers(min_value=-1080, max_value=1023), st.integers(1, 2**52))
def test_extreme_exponents_match_rfc8785(exp: int, mant: int) -> None:
    f = math.ldexp(mant, exp - 52)
    if math.isfinite(f):
        assert canonical_json({"n": f}) == rfc8785.dumps({"n": f})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_refused_with_path(value: float) -> None:
    with pytest.raises(NonFiniteNumberError) as info:
        canonical_json({"a": [1, {"b c": value}]})
    assert info.value.path == '$.a[1]["b c"]'
    assert isinstance(info.value, InvalidInputError)
    assert isinstance(info.value, ValueError)
    assert '$.a[1]["b c"]' in str(info.value)


@given(st.integers())
@example(MAX_SAFE)
@example(-MAX_SAFE)
@example(MAX_SAFE + 1)
@example(-MAX_SAFE - 1)
@example(2**64)
@example(10**16)
@example(-(10**20))
@example(10**21)
@example(10**400)
def test_integers_match_rfc8785(n: int) -> None:
    if -MAX_SAFE <= n <= MAX_SAFE:
        assert canonical_json(n) == rfc8785.dumps(n) == str(n).encode()
        return
    with pytest.raises(rfc8785.IntegerDomainError):
        rfc8785.dumps(n)
    # rfc8785 refuses every such int; we accept the ones that are exactly how it writes a double
    # (1e16 -> 10000000000000000), so cross-check those against its output for that double.
    try:
        as_double = rfc8785.dumps(float(n))
    except OverflowError:
        as_double = b""
    if as_double == str(n).encode():
        assert canonical_json({"x": [0, n]}) == b'{"x":[0,' + as_double + b"]}"
    else:
        with pytest.raises(IntegerDomainError) as info:
            canonical_json({"x": [0, n]})
        assert info.value.path == "$.x[1]"


def test_integral_float_beyond_safe_range_is_fine_but_the_int_is_not() -> None:
    """The documented choice: an int beyond the safe range is refused unless it is a double's RFC 8785 text."""
    assert canonical_json(2.0**53) == rfc8785.dumps(2.0**53) == b"9007199254740992"
    assert canonical_json(2**53) == b"9007199254740992"  # exactly how RFC 8785 writes 2.0**53
    with pytest.raises(IntegerDomainError):
        canonical_json(2**53 + 1)  # would be read as 2**53: refused, not rounded
    with pytest.raises(IntegerDomainError):
        canonical_json(2**60)  # a double's value, but RFC 8785 writes that double 1152921504606847000


def test_bools_and_null() -> None:
    assert canonical_json([True, False, None, 1, 0]) == b"[true,false,null,1,0]"


# --------------------------------------------------------------------------- strings


def test_rfc8785_string_example() -> None:
    s = "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/"
    assert canonical_json(s) == '"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"'.encode()
    assert canonical_json(s) == rfc8785.dumps(s)


def test_escapes_exact() -> None:
    s = "".join(chr(i) for i in range(0x20)) + '"\\/\x7f\u2028\u2029\U0001f600'
    expected = (
        '"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f'
        "\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d"
        '\\u001e\\u001f\\"\\\\/\x7f\u2028\u2029\U0001f600"'
    ).encode("utf-8")
    assert canonical_json(s) == expected


@given(st.text())
def test_text_matches_rfc8785(s: str) -> None:
    assert canonical_json(s) == rfc8785.dumps(s)


@given(st.text(st.characters(max_codepoint=0x7F)))
def test_ascii_and_controls_match_rfc8785(s: str) -> None:
    assert canonical_json(s) == rfc8785.dumps(s)


@given(st.text(st.characters(min_codepoint=0x10000)))
def test_astral_match_rfc8785(s: str) -> None:
    assert canonical_json(s) == rfc8785.dumps(s)


@given(st.text(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), st.text(), st.data())
def test_lone_surrogates_refused_like_rfc8785(pre: str, sur: str, post: str, data: st.DataObject) -> None:
    s = pre + sur + post
    as_key = data.draw(st.booleans())
    obj: Any = {"ok": 1, s: 2} if as_key else {"ok": ["x", s]}
    assert _same_outcome(obj) is None
    with pytest.raises(CanonicalizationError) as info:
        canonical_json(obj)
    assert info.value.path is not None
    if as_key:
        assert info.value.path.startswith('$["') or info.value.path.startswith("$.")
    else:
        assert info.value.path == "$.ok[1]"


def test_surrogate_pair_is_one_character() -> None:
    # A proper pair (one astral code point) is fine; written as 4 UTF-8 bytes.
    assert canonical_json("\U0001f600") == b'"\xf0\x9f\x98\x80"'


# --------------------------------------------------------------------------- objects


def test_rfc8785_sort_example() -> None:
    obj = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    out = canonical_json(obj).decode("utf-8")
    keys = list(json.loads(out))
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    assert out == rfc8785.dumps(obj).decode("utf-8")


def test_utf16_not_code_point_order() -> None:
    # U+1F600 > U+FFFF as a code point, but its UTF-16 lead unit 0xD83D < 0xFFFF.
    assert canonical_json({"\uffff": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\uffff":1}'.encode()


_any_key = st.one_of(st.text(max_size=4), st.text(st.characters(min_codepoint=0xE000), max_size=3))
_nested = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(_any_key, inner, max_size=5)
    ),
    max_leaves=20,
)


@given(_nested)
def test_nested_values_match_rfc8785(obj: Any) -> None:
    _same_outcome(obj)


@given(json_values)
def test_output_is_json_of_the_same_value_and_idempotent(obj: Any) -> None:
    out = canonical_json(obj)
    again = json.loads(out)  # a float >= 2**53 comes back as an int (1e16 -> 10000000000000000): still hashable
    assert canonical_json(again) == out
    assert b" " not in out.replace(b'" "', b"").split(b'"')[0]  # no whitespace before the first string


@given(st.dictionaries(_any_key, st.integers(0, 9), min_size=2, max_size=8), st.randoms(use_true_random=False))
def test_key_insertion_order_irrelevant(obj: dict[str, int], rnd: random.Random) -> None:
    items = list(obj.items())
    rnd.shuffle(items)
    assert canonical_json(dict(items)) == canonical_json(obj)


@pytest.mark.parametrize(
    ("obj", "path"),
    [({1: "x"}, "$[1]"), ({"a": b"x"}, "$.a"), ([{"a": {1, 2}}], "$[0].a"), ({"a": {"b": object()}}, "$.a.b")],
)
def test_unsupported_values_refused(obj: Any, path: str) -> None:
    with pytest.raises(CanonicalizationError) as info:
        canonical_json(obj)
    assert info.value.path == path


def test_too_deep_and_cyclic_refused() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(CanonicalizationError):
        canonical_json(deep)
    cyc: list[Any] = []
    cyc.append(cyc)
    with pytest.raises(CanonicalizationError):
        canonical_json(cyc)


# --------------------------------------------------------------------------- thread hash

HASH_RE = re.compile(r"sha256:[0-9a-f]{64}\Z")


def _thread(doc: dict[str, Any]) -> Thread:
    return from_builtins(doc, Thread)


def _h(doc: dict[str, Any], exclude: bool = True) -> str:
    return thread_hash(_thread(doc), exclude_noncanonical=exclude)


@THREAD_SETTINGS
@given(threads())
def test_hash_format_and_definition(doc: dict[str, Any]) -> None:
    t = _thread(doc)
    for exclude in (True, False):
        h = thread_hash(t, exclude_noncanonical=exclude)
        assert HASH_RE.match(h)
        expected = hashlib.sha256(canonical_json(canonical_form(t, exclude_noncanonical=exclude))).hexdigest()
        assert h == "sha256:" + expected
    assert canonical_form(t, exclude_noncanonical=False) == to_builtins(t)
    assert hash_json(to_json(t)) == thread_hash(t)


def _shuffled(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, dict):
        items = [(k, _shuffled(v, rnd)) for k, v in value.items()]
        rnd.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@THREAD_SETTINGS
@given(threads(), st.randoms(use_true_random=False), st.sampled_from([None, 0, 1, 4, "\t"]), st.booleans())
def test_hash_ignores_key_order_whitespace_and_escaping(
    doc: dict[str, Any], rnd: random.Random, indent: Any, ascii_only: bool
) -> None:
    text = json.dumps(_shuffled(doc, rnd), indent=indent, ensure_ascii=ascii_only, separators=None)
    for exclude in (True, False):
        assert hash_json(text.encode(), exclude_noncanonical=exclude) == _h(doc, exclude)
        assert hash_json(text, exclude_noncanonical=exclude) == _h(doc, exclude)


def _is_excluded_message(msg: dict[str, Any]) -> bool:
    return msg["message_type"] == "system" and msg["event_type"].startswith(("data-sys-", "meta:"))


def _is_excluded_part(part: dict[str, Any]) -> bool:
    return bool(part["part_kind"].startswith("meta:"))


def _edit_sites(doc: dict[str, Any]) -> list[tuple[str, Callable[[dict[str, Any]], None]]]:
    """Semantic edits of hashed (never excluded) values, each applied to a deep copy."""
    sites: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
        ("thread created_at", lambda d: d.__setitem__("created_at", d["created_at"] + "0")),
        ("thread_id", lambda d: d.__setitem__("thread_id", d["thread_id"] + "x")),
        ("title", lambda d: d.__setitem__("title", (d.get("title") or "") + "!")),
    ]

    def parts_sites(where: str, get_parts: Callable[[dict[str, Any]], list[Any]]) -> None:
        sites.append((f"{where}: add a part", lambda d: get_parts(d).append({"part_kind": "text", "content": "added"})))
        for k, part in enumerate(get_parts(doc)):
            if _is_excluded_part(part):
                continue
            if part["part_kind"] == "text":
                sites.append(
                    (
                        f"{where}.parts[{k}] text",
                        lambda d, k=k: get_parts(d)[k].__setitem__("content", get_parts(d)[k]["content"] + "x"),
                    )
                )
            if part["part_kind"] == "tool-call":
                sites.append(
                    (
                        f"{where}.parts[{k}] args",
                        lambda d, k=k: get_parts(d)[k].__setitem__("args", {"changed": get_parts(d)[k].get("args")}),
                    )
                )
            sites.append((f"{where}.parts[{k}] removed", lambda d, k=k: get_parts(d).pop(k)))

    for i, turn in enumerate(doc["turns"]):
        if turn["turn_type"] == "user":
            sites.append(
                (
                    f"turn {i} submitted_at",
                    lambda d, i=i: d["turns"][i].__setitem__("submitted_at", d["turns"][i]["submitted_at"] + "0"),
                )
            )
            parts_sites(f"turn {i}", lambda d, i=i: d["turns"][i]["parts"])  # type: ignore[misc]
        else:
            sites.append(
                (
                    f"turn {i} started_at",
                    lambda d, i=i: d["turns"][i].__setitem__("started_at", d["turns"][i]["started_at"] + "0"),
                )
            )
            for j, msg in enumerate(turn["messages"]):
                if _is_excluded_message(msg):
                    continue
                sites.append(
                    (
                        f"turn {i} msg {j} timestamp",
                        lambda d, i=i, j=j: d["turns"][i]["messages"][j].__setitem__(
                            "timestamp", d["turns"][i]["messages"][j]["timestamp"] + "0"
                        ),
                    )
                )
                if msg["message_type"] != "system":
                    parts_sites(f"turn {i} msg {j}", lambda d, i=i, j=j: d["turns"][i]["messages"][j]["parts"])  # type: ignore[misc]
    return sites


@THREAD_SETTINGS
@given(threads(), st.data())
def test_semantic_edit_changes_hash(doc: dict[str, Any], data: st.DataObject) -> None:
    name, edit = data.draw(st.sampled_from(_edit_sites(doc)), label="edit")
    edited = copy.deepcopy(doc)
    edit(edited)
    assert edited != doc
    for exclude in (True, False):
        assert _h(edited, exclude) != _h(doc, exclude), name


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return [path]


def _changed(v: Any) -> Any:
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return 1 if v == 0 else -v
    if isinstance(v, float):
        return 1.0 if v == 0 else -v
    if isinstance(v, str):
        return v + "!"
    return 0  # null


@THREAD_SETTINGS
@given(threads(), st.data())
def test_any_leaf_edit_changes_unfiltered_hash(doc: dict[str, Any], data: st.DataObject) -> None:
    """With exclusion off, changing any value anywhere (that still decodes) changes the hash."""
    path = data.draw(st.sampled_from(_leaves(doc)), label="leaf")
    edited = copy.deepcopy(doc)
    target = edited
    for seg in path[:-1]:
        target = target[seg]
    target[path[-1]] = _changed(target[path[-1]])
    try:
        t = _thread(edited)
    except InvalidInputError:
        return  # e.g. message_type "request!" is not a valid document
    assert thread_hash(t, exclude_noncanonical=False) != _h(doc, False), path


# ----- non-canonical tiers


def _strip_noncanonical(doc: Any) -> Any:
    """Independent reimplementation of the exclusion rules, on JSON builtins."""
    if isinstance(doc, dict):
        out = {k: _strip_noncanonical(v) for k, v in doc.items() if not k.startswith("meta:")}
        return out
    if isinstance(doc, list):
        return [_strip_noncanonical(v) for v in doc]
    return doc


def _drop_excluded(doc: dict[str, Any]) -> dict[str, Any]:
    d = copy.deepcopy(doc)
    for turn in d["turns"]:
        if "parts" in turn:
            turn["parts"] = [p for p in turn["parts"] if not _is_excluded_part(p)]
        if "messages" in turn:
            turn["messages"] = [m for m in turn["messages"] if not _is_excluded_message(m)]
            for m in turn["messages"]:
                if "parts" in m:
                    m["parts"] = [p for p in m["parts"] if not _is_excluded_part(p)]
    return _strip_noncanonical(d)  # type: ignore[no-any-return]


@THREAD_SETTINGS
@given(threads())
def test_canonical_form_matches_reference_exclusion(doc: dict[str, Any]) -> None:
    t = _thread(doc)
    before = to_builtins(t)
    assert canonical_form(t) == _drop_excluded(doc)
    assert to_builtins(t) == before  # canonical_form did not mutate the thread through shared dicts
    # Removing everything excluded leaves the default hash alone ...
    stripped = _drop_excluded(doc)
    assert _h(stripped) == _h(doc)
    # ... and changes the unfiltered hash exactly when something was removed.
    assert (_h(stripped, False) == _h(doc, False)) == (stripped == doc)


_noise_value = st.one_of(
    st.none(),
    st.integers(-5, 5),
    st.text(max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(-5, 5), max_size=2),
)


@THREAD_SETTINGS
@given(threads(), st.data())
def test_adding_noncanonical_content_keeps_hash(doc: dict[str, Any], data: st.DataObject) -> None:
    edited = copy.deepcopy(doc)
    what = data.draw(st.sampled_from(["sys-event", "meta-event", "meta-part", "meta-key"]), label="what")
    agent_turns = [t for t in edited["turns"] if t["turn_type"] == "agent"]
    if what in ("sys-event", "meta-event") and agent_turns:
        turn = data.draw(st.sampled_from(agent_turns), label="turn")
        prefix = "data-sys-" if what == "sys-event" else "meta:"
        event = {
            "message_type": "system",
            "timestamp": "2025-01-01T00:00:00Z",
            "event_type": prefix + data.draw(st.text(max_size=5), label="name"),
            "event_data": data.draw(_noise_value, label="payload"),
        }
        turn["messages"].insert(data.draw(st.integers(0, len(turn["messages"])), label="at"), event)
    elif what == "meta-part" and edited["turns"]:
        turn = data.draw(st.sampled_from(edited["turns"]), label="turn")
        holders = [turn] if turn["turn_type"] == "user" else [m for m in turn["messages"] if "parts" in m]
        if not holders:
            holders = []
        for holder in holders[:1]:
            holder["parts"].append({"part_kind": "meta:" + data.draw(st.text(max_size=4)), "v": 1})
        if not holders:
            edited["meta:fallback"] = 1
    else:
        # a meta:* key on a random object of the document
        objects: list[dict[str, Any]] = []

        def collect(v: Any) -> None:
            if isinstance(v, dict):
                if v is not edited["agents"]:  # a registry map: its values must be AgentConfigs
                    objects.append(v)
                for x in v.values():
                    collect(x)
            elif isinstance(v, list):
                for x in v:
                    collect(x)

        collect(edited)
        obj = data.draw(st.sampled_from(objects), label="object")
        obj["meta:" + data.draw(st.text(max_size=4), label="key")] = data.draw(_noise_value, label="value")
    if edited == doc:
        edited["meta:fallback"] = True
    assert _h(edited) == _h(doc)
    assert _h(edited, False) != _h(doc, False)


def test_canonical_form_exact_example() -> None:
    doc = {
        "version": "0.0.4",
        "thread_id": "t1",
        "created_at": "2025-01-01T00:00:00Z",
        "updated_at": "2025-01-01T00:00:00Z",
        "meta:origin": "importer",
        "agents": {"a": {"agent_id": "a", "agent_name": "A", "created_at": "x", "meta:cost": 3}},
        "turns": [
            {
                "turn_type": "user",
                "submitted_at": "s",
                "parts": [
                    {"part_kind": "user-prompt", "content": [{"kind": "meta:hint", "v": 1}, "hi"]},
                    {"part_kind": "meta:annotation", "note": "x"},
                    {"part_kind": "custom:graph", "nodes": [], "meta:layout": 1},
                ],
                "client_metadata": {"ui:mode": "x", "meta:debug": True},
            },
            {
                "turn_type": "agent",
                "agent_id": "a",
                "started_at": "s",
                "completion_status": "complete",
                "messages": [
                    {"message_type": "system", "timestamp": "t", "event_type": "data-sys-latency", "event_data": 1},
                    {"message_type": "system", "timestamp": "t", "event_type": "meta:cache-hit"},
                    {
                        "message_type": "system",
                        "timestamp": "t",
                        "event_type": "data-app-x",
                        "event_data": {"meta:k": 1, "k": 2},
                    },
                    {"message_type": "system", "timestamp": "t", "event_type": "data-tp-error"},
                    {"message_type": "system", "timestamp": "t", "event_type": "data-system"},
                    {
                        "message_type": "response",
                        "timestamp": "t",
                        "agent_id": "a",
                        "parts": [
                            {
                                "part_kind": "tool-call",
                                "tool_name": "f",
                                "tool_call_id": "1",
                                "args": {"meta:x": 1, "y": [{"meta:z": 0}]},
                            }
                        ],
                    },
                ],
            },
        ],
    }
    form = canonical_form(_thread(doc))
    assert form == {
        "version": "0.0.4",
        "thread_id": "t1",
        "created_at": "2025-01-01T00:00:00Z",
        "updated_at": "2025-01-01T00:00:00Z",
        "agents": {"a": {"agent_id": "a", "agent_name": "A", "created_at": "x"}},
        "turns": [
            {
                "turn_type": "user",
                "submitted_at": "s",
                "parts": [
                    {"part_kind": "user-prompt", "content": [{"kind": "meta:hint", "v": 1}, "hi"]},
                    {"part_kind": "custom:graph", "nodes": []},
                ],
                "client_metadata": {"ui:mode": "x"},
            },
            {
                "turn_type": "agent",
                "agent_id": "a",
                "started_at": "s",
                "completion_status": "complete",
                "messages": [
                    {"message_type": "system", "timestamp": "t", "event_type": "data-app-x", "event_data": {"k": 2}},
                    {"message_type": "system", "timestamp": "t", "event_type": "data-tp-error"},
                    {"message_type": "system", "timestamp": "t", "event_type": "data-system"},
                    {
                        "message_type": "response",
                        "timestamp": "t",
                        "agent_id": "a",
                        "parts": [
                            {"part_kind": "tool-call", "tool_name": "f", "tool_call_id": "1", "args": {"y": [{}]}}
                        ],
                    },
                ],
            },
        ],
    }
    assert canonical_form(_thread(doc), exclude_noncanonical=False) == doc


def test_canonical_form_needs_a_thread() -> None:
    with pytest.raises(TypeError):
        canonical_form({"version": "0.0.4"})  # type: ignore[arg-type]


def test_hash_of_unsafe_integer_names_path() -> None:
    doc = {
        "version": "0.0.4",
        "thread_id": "t",
        "created_at": "c",
        "updated_at": "u",
        "agents": {},
        "turns": [
            {
                "turn_type": "user",
                "submitted_at": "s",
                "parts": [{"part_kind": "tool-call", "tool_name": "f", "tool_call_id": "1", "args": {"id": 2**53 + 1}}],
            }
        ],
    }
    with pytest.raises(IntegerDomainError) as info:
        hash_json(json.dumps(doc).encode())
    assert info.value.path == "$.turns[0].parts[0].args.id"


def test_hash_json_rejects_malformed_json() -> None:
    with pytest.raises(InvalidInputError):
        hash_json(b'{"version": ')
    with pytest.raises(InvalidInputError):
        hash_json(b'{"version": "0.0.4"}')


def test_known_hash_is_stable() -> None:
    """Pins the hash of a small document: a change here breaks every stored hash."""
    doc = {
        "version": "0.0.4",
        "thread_id": "550e8400-e29b-41d4-a716-446655440000",
        "created_at": "2025-01-20T10:00:00Z",
        "updated_at": "2025-01-20T10:00:20Z",
        "agents": {},
        "turns": [
            {
                "turn_type": "user",
                "submitted_at": "2025-01-20T10:00:00Z",
                "parts": [{"part_kind": "user-prompt", "content": "What's the weather? \U0001f324"}],
            }
        ],
        "metadata": {"n": 1.5e-7, "big": 1e21, "z": -0.0},
    }
    jcs = rfc8785.dumps(doc)
    assert canonical_json(doc) == jcs
    assert _h(doc) == "sha256:" + hashlib.sha256(jcs).hexdigest()


# -------------------- at the edges, without Hypothesis (was protocol/test_canonical.py)

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
