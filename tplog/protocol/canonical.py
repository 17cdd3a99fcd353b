"""Canonical JSON (RFC 8785, JCS) and the canonical hash of a ThreadProtocol thread.

:func:`canonical_json` serializes JSON builtins exactly as RFC 8785 requires, so
two documents with the same JSON data model give the same bytes whatever their
key order, whitespace or escaping:

- objects: members sorted by their keys' UTF-16 code units (not code points:
  an astral character such as U+1F600 sorts *before* U+E000..U+FFFF), no
  whitespace anywhere;
- strings: UTF-8; only ``"``, ``\\`` and U+0000..U+001F are escaped, as
  ``\\b \\f \\n \\r \\t`` where those exist and as lowercase ``\\u00xx``
  otherwise; everything else (U+007F, U+2028, astral characters) is literal;
- numbers: ECMAScript ``Number.prototype.toString`` (ES6 7.1.12.1): shortest
  round-tripping digits, plain notation for 1e-6 <= |x| < 1e21 (``100.0`` ->
  ``100``, ``1e-6`` -> ``0.000001``), exponent form otherwise (``1e21`` ->
  ``1e+21``, ``1e-7`` -> ``1e-7``); ``-0.0`` -> ``0``;
- ``true``/``false``/``null``; tuples are arrays.

What is refused, with a :class:`CanonicalizationError` (an
:class:`~tplog.InvalidInputError`, so a ``ValueError``) whose ``path`` names
the offending value in tplog.protocol.json's path format (``$.turns[0].parts[1].args.n``,
``$.metadata["agent.routing"]`` for a key that is not an identifier):

- NaN and ±Infinity (:class:`NonFiniteNumberError`): JSON has no such values;
- integers outside ±(2**53-1) (:class:`IntegerDomainError`), *unless* the
  integer is exactly how RFC 8785 writes a double (see below). Refusing them
  is the choice of the ``rfc8785`` package (it raises ``IntegerDomainError``
  for every one), made because JCS numbers are IEEE doubles: such an integer
  cannot be serialized without silently changing its value (2**53+1 would
  hash like 2**53). The consequence: a thread holding such an integer
  anywhere (a tool argument, an id in ``event_data``) has no canonical hash
  until the producer writes it as a string. A *float* of the same magnitude is
  fine (``2.0**60`` -> ``1152921504606847000``) because it already is a double.

  The exception: ES6 (and so RFC 8785, ``JSON.stringify``, Go's
  ``encoding/json``, and :func:`canonical_json` itself) writes every double
  with 2**53 <= |x| < 1e21 as a plain integer literal (``1e16`` ->
  ``10000000000000000``, ``2.0**60`` -> ``1152921504606847000``), which a
  JSON parser such as msgspec's hands back as an ``int``. An integer whose
  decimal text is *exactly* the ES6 spelling of the double nearest to it is
  therefore accepted and written unchanged: it is that double, and nothing is
  rounded (the output is the input's own text). Without this, a document
  holding such a float could not be hashed once a JavaScript client had
  serialized it, and canonical JSON could not be canonicalized again. Any
  other such integer (``9007199254740993``, ``1152921504606846976``, anything
  of 22 or more digits) is still refused;
- strings or keys containing a lone surrogate (U+D800..U+DFFF not in a pair;
  the ``rfc8785`` package refuses them too): they have no UTF-8/UTF-16 form;
- non-string object keys and any type that is not a JSON builtin;
- nesting deeper than Python's recursion limit, or a cyclic structure.

:func:`canonical_form` turns a :class:`~tplog.Thread` into the builtins that
are hashed, optionally without the non-canonical tiers the protocol lets an
implementation leave out; :func:`thread_hash` is ``"sha256:" +`` the hex
SHA-256 of their canonical JSON; :func:`hash_json` does the same from raw JSON.

Only the standard library and msgspec are used at run time; the tests check
the output against the ``rfc8785`` package.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final

import msgspec

from tplog.errors import InvalidInputError
from tplog.protocol.json import from_json, to_builtins
from tplog.protocol.model import Thread

__all__ = [
    "CanonicalizationError",
    "IntegerDomainError",
    "MAX_SAFE_INTEGER",
    "NonFiniteNumberError",
    "NONCANONICAL_EVENT_PREFIXES",
    "NONCANONICAL_KEY_PREFIX",
    "NONCANONICAL_PART_PREFIX",
    "canonical_form",
    "canonical_json",
    "hash_json",
    "thread_hash",
]

#: Largest integer magnitude :func:`canonical_json` accepts (2**53 - 1).
MAX_SAFE_INTEGER: Final = 2**53 - 1

#: ``event_type`` prefixes of system messages dropped by ``exclude_noncanonical``.
NONCANONICAL_EVENT_PREFIXES: Final = ("data-sys-", "meta:")
#: ``part_kind`` prefix of message parts dropped by ``exclude_noncanonical``.
NONCANONICAL_PART_PREFIX: Final = "meta:"
#: Prefix of object keys dropped, at any depth, by ``exclude_noncanonical``.
NONCANONICAL_KEY_PREFIX: Final = "meta:"


class CanonicalizationError(InvalidInputError):
    """A value has no RFC 8785 canonical form; ``path`` names it (``$`` is the root)."""


class NonFiniteNumberError(CanonicalizationError):
    """A float is NaN or ±Infinity, which JSON (and so JCS) cannot represent."""


class IntegerDomainError(CanonicalizationError):
    """An integer lies outside ±(2**53-1), where IEEE doubles (JCS numbers) lose precision."""


# --------------------------------------------------------------------------- serialization

_ESCAPE_RE: Final = re.compile(r'[\x00-\x1f"\\]')
_ESCAPES: Final = {chr(i): f"\\u{i:04x}" for i in range(0x20)}
_ESCAPES.update({'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
_SURROGATE_RE: Final = re.compile("[\ud800-\udfff]")


def _esc(match: re.Match[str]) -> str:
    return _ESCAPES[match.group(0)]


class _Fail(Exception):
    """Internal: an error on its way up, collecting the path segments it passes."""

    def __init__(self, cls: type[CanonicalizationError], message: str) -> None:
        super().__init__(message)
        self.cls = cls
        self.message = message
        self.segments: list[str] = []


def _key_segment(key: str) -> str:
    """The path segment of ``key``, in tplog.protocol.json's format: ``.name`` or ``["a.b"]``."""
    if key.isidentifier():
        return "." + key
    try:
        return "[" + msgspec.json.encode(key).decode() + "]"
    except UnicodeEncodeError:  # a lone surrogate: show it as its \\uXXXX escape
        quoted = _SURROGATE_RE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", _ESCAPE_RE.sub(_esc, key))
        return '["' + quoted + '"]'


def _format_float(f: float) -> str:
    """ECMAScript Number::toString for a finite float (RFC 8785 section 3.2.2.3)."""
    if f != f or f in (float("inf"), float("-inf")):
        raise _Fail(NonFiniteNumberError, f"{f!r} is not a JSON number")
    if f == 0.0:
        return "0"  # also -0.0
    sign = "-" if f < 0 else ""
    r = repr(abs(f))  # shortest digits that round-trip, like ES6
    mant, _, exp_s = r.partition("e")
    exp = int(exp_s) if exp_s else 0
    intpart, _, frac = mant.partition(".")
    digits = (intpart + frac).lstrip("0")
    stripped = digits.rstrip("0")
    k = len(stripped)
    # value = int(stripped) * 10**(n - k), as in the ES6 algorithm
    n = k + exp - len(frac) + (len(digits) - k)
    if k <= n <= 21:
        s = stripped + "0" * (n - k)
    elif 0 < n <= 21:
        s = stripped[:n] + "." + stripped[n:]
    elif -6 < n <= 0:
        s = "0." + "0" * (-n) + stripped
    else:
        e = n - 1
        s = stripped[0] + ("." + stripped[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return sign + s


#: Doubles of magnitude below 1e21 (< 2**70) are written in plain notation; an
#: integer beyond this bit length can never be the ES6 spelling of a double.
_PLAIN_NOTATION_BITS: Final = 70


def _large_integer(n: int) -> str:
    """An integer beyond ±(2**53-1), written as itself if that is the ES6 spelling of a double.

    See the module docstring: ``10000000000000000`` (how ES6 writes ``1e16``)
    is accepted, ``9007199254740993`` (not any double's spelling: it would be
    read as ``9007199254740992``) is refused with :class:`IntegerDomainError`.
    """
    bits = n.bit_length()
    try:
        nearest = _format_float(float(n))
    except OverflowError:
        why = "it is beyond the range of doubles"
    else:
        if bits <= _PLAIN_NOTATION_BITS and nearest == str(n):
            return nearest
        why = f"JCS reads it as the nearest double, written {nearest}"
    shown = str(n) if bits <= 256 else f"of {bits} bits"  # str() of a huge int is slow or refused
    raise _Fail(
        IntegerDomainError,
        f"Integer {shown} is outside the JSON safe range ±(2**53-1) and is not how RFC 8785 writes a double "
        f"({why}); write it as a string",
    )


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be")


def _emit(obj: Any, out: list[str]) -> None:
    # Checked in order of frequency in threads; bool before int (bool is an int).
    if isinstance(obj, str):
        out.append('"' + _ESCAPE_RE.sub(_esc, obj) + '"')
    elif isinstance(obj, dict):
        if not obj:
            out.append("{}")
            return
        for key in obj:
            if not isinstance(key, str):
                fail = _Fail(CanonicalizationError, f"Object key {key!r} is not a string")
                fail.segments.append(f"[{key!r}]")
                raise fail
        try:
            keys = sorted(obj, key=_utf16_key)
        except UnicodeEncodeError:
            bad = next(k for k in obj if _SURROGATE_RE.search(k))
            fail = _Fail(CanonicalizationError, "Object key contains a lone surrogate (not valid Unicode text)")
            fail.segments.append(_key_segment(bad))
            raise fail from None
        out.append("{")
        first = True
        for key in keys:
            if not first:
                out.append(",")
            first = False
            out.append('"' + _ESCAPE_RE.sub(_esc, key) + '":')
            try:
                _emit(obj[key], out)
            except _Fail as fail:
                fail.segments.append(_key_segment(key))
                raise
        out.append("}")
    elif isinstance(obj, (list, tuple)):
        if not obj:
            out.append("[]")
            return
        out.append("[")
        for i, item in enumerate(obj):
            if i:
                out.append(",")
            try:
                _emit(item, out)
            except _Fail as fail:
                fail.segments.append(f"[{i}]")
                raise
        out.append("]")
    elif obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, int):
        n = int(obj)
        out.append(str(n) if -MAX_SAFE_INTEGER <= n <= MAX_SAFE_INTEGER else _large_integer(n))
    elif isinstance(obj, float):
        out.append(_format_float(float(obj)))
    else:
        raise _Fail(CanonicalizationError, f"Unsupported type {type(obj).__name__} (not a JSON value)")


def _find_surrogate(obj: Any) -> list[str] | None:
    """Path segments (root first) to the first string value holding a lone surrogate."""
    if isinstance(obj, str):
        return [] if _SURROGATE_RE.search(obj) else None
    if isinstance(obj, dict):
        for k, v in obj.items():
            sub = _find_surrogate(v)
            if sub is not None:
                return [_key_segment(k), *sub]
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            sub = _find_surrogate(v)
            if sub is not None:
                return [f"[{i}]", *sub]
    return None


def canonical_json(obj: Any) -> bytes:
    """The RFC 8785 canonical JSON bytes of JSON builtins (see the module docstring).

    Equal JSON data models give equal bytes; different ones give different
    bytes (JCS is injective on what it accepts). Raises a
    :class:`CanonicalizationError` subclass naming the JSON path of the first
    value that has no canonical form; nothing is returned partially.
    """
    out: list[str] = []
    try:
        _emit(obj, out)
    except _Fail as fail:
        raise fail.cls(fail.message, path="$" + "".join(reversed(fail.segments))) from None
    except RecursionError:
        raise CanonicalizationError("Nesting too deep (or a cyclic structure)", path="$") from None
    text = "".join(out)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        segments = _find_surrogate(obj) or []
        raise CanonicalizationError(
            "String contains a lone surrogate (not valid Unicode text)", path="$" + "".join(segments)
        ) from None


# --------------------------------------------------------------------------- thread form


def _strip_meta_keys(value: Any) -> Any:
    """A deep copy of ``value`` without object keys starting with ``meta:``."""
    if isinstance(value, dict):
        return {
            k: _strip_meta_keys(v)
            for k, v in value.items()
            if not (isinstance(k, str) and k.startswith(NONCANONICAL_KEY_PREFIX))
        }
    if isinstance(value, list):
        return [_strip_meta_keys(v) for v in value]
    return value


def _keep_part(part: Any) -> bool:
    kind = part.get("part_kind") if isinstance(part, dict) else None
    return not (isinstance(kind, str) and kind.startswith(NONCANONICAL_PART_PREFIX))


def _keep_message(msg: Any) -> bool:
    if not isinstance(msg, dict) or msg.get("message_type") != "system":
        return True
    event = msg.get("event_type")
    return not (isinstance(event, str) and event.startswith(NONCANONICAL_EVENT_PREFIXES))


def canonical_form(thread: Thread, *, exclude_noncanonical: bool = True) -> dict[str, Any]:
    """The JSON builtins of ``thread`` that :func:`thread_hash` hashes (a fresh copy).

    With ``exclude_noncanonical=False`` this is exactly
    :func:`tplog.to_builtins` of the thread: every field, extension and unknown
    key is hashed. With ``exclude_noncanonical=True`` (the default) three
    things are left out, and only these:

    1. system messages (``message_type: "system"``, in any agent turn's
       ``messages``) whose ``event_type`` starts with ``data-sys-`` (v0.0.4
       tier 2, runtime telemetry) or ``meta:`` (v0.0.3 implementation
       metadata). ``data-tp-*``, ``data-app-*``, other ``data-*`` and any other
       event names stay;
    2. message parts whose ``part_kind`` starts with ``meta:``, in a user
       turn's ``parts`` and in a request/response message's ``parts``.
       ``custom:*`` and other unknown kinds stay; user-content items (the
       ``kind`` objects inside a ``user-prompt`` part) are *not* filtered by
       kind;
    3. every object member whose key starts with ``meta:``, at any depth and in
       any object: unknown fields of protocol objects, ``metadata``,
       ``client_metadata``, ``event_data``, tool ``args``/``content``, even the
       ``agents`` registry (an agent id ``meta:x`` vanishes from the hash).

    The consequence: adding, changing or removing any of these never changes
    the hash, and a turn whose messages were all excluded is still hashed (with
    an empty ``messages``). Exclusion works on the wire names (prefix match,
    case-sensitive); filtering happens before the key strip, which does not
    affect it since the filtered names are values, not keys.
    """
    if not isinstance(thread, Thread):
        raise TypeError(f"canonical_form() needs a tplog.Thread, not {type(thread).__name__}")
    doc: dict[str, Any] = to_builtins(thread)
    if not exclude_noncanonical:
        return doc
    turns = []
    for turn in doc.get("turns", ()):
        if isinstance(turn, dict):
            turn = dict(turn)
            if isinstance(turn.get("parts"), list):
                turn["parts"] = [p for p in turn["parts"] if _keep_part(p)]
            if isinstance(turn.get("messages"), list):
                messages = []
                for msg in turn["messages"]:
                    if not _keep_message(msg):
                        continue
                    if isinstance(msg, dict) and isinstance(msg.get("parts"), list):
                        msg = {**msg, "parts": [p for p in msg["parts"] if _keep_part(p)]}
                    messages.append(msg)
                turn["messages"] = messages
        turns.append(turn)
    if "turns" in doc:
        doc = {**doc, "turns": turns}
    stripped: dict[str, Any] = _strip_meta_keys(doc)
    return stripped


def thread_hash(thread: Thread, *, exclude_noncanonical: bool = True) -> str:
    """``"sha256:<64 lowercase hex>"`` of ``canonical_json(canonical_form(thread, ...))``.

    Stable across key order, whitespace and escaping of the source JSON and
    across decode/encode through tplog; any change to a hashed value changes
    it. Raises :class:`CanonicalizationError` (with the path) if the thread
    holds a value JCS refuses, e.g. the integer 2**53+1 (see the module docstring).
    """
    data = canonical_json(canonical_form(thread, exclude_noncanonical=exclude_noncanonical))
    return "sha256:" + hashlib.sha256(data).hexdigest()


def hash_json(data: bytes | str, *, exclude_noncanonical: bool = True) -> str:
    """:func:`thread_hash` of a raw ThreadProtocol JSON document.

    The document is decoded with :func:`tplog.from_json` first, so malformed or
    wrongly shaped JSON raises :class:`~tplog.InvalidInputError` with its path.
    """
    thread: Thread = from_json(data)
    return thread_hash(thread, exclude_noncanonical=exclude_noncanonical)
