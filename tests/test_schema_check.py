"""The schema check an append runs (``Codec._check_dec``: the event schema with
``Any`` values left undecoded) refuses exactly what a reader's decoder
(``Codec._event_dec``, the full schema) cannot decode, with the same message.

Differential, on generated threads: every event of a valid thread passes both;
then one event's msgpack tree is mutated at a random place (a value replaced by
another of any type, a key removed or added) and both decoders must agree.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from strategies import THREAD_SETTINGS, json_values, threads

from tplog import MessageRecorded, ThreadStarted
from tplog.codec import Codec
from tplog.projections.fold import events_from_thread
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins

_codec = Codec()

Path = tuple[Any, ...]


def _paths(tree: Any, at: Path = ()) -> list[Path]:
    """Every place in a decoded msgpack tree: map values by key, array items by index."""
    out = [at]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _paths(v, (*at, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += _paths(v, (*at, i))
    return out


def _outcome(dec: msgspec.msgpack.Decoder[Any], body: bytes) -> tuple[str, str]:
    try:
        dec.decode(body)
    except msgspec.DecodeError as exc:
        return type(exc).__name__, str(exc)
    return "ok", ""


_msgpack_ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)  # what msgpack can hold
_new_values = st.one_of(json_values, _msgpack_ints, st.binary(max_size=4), st.lists(_msgpack_ints, max_size=2))


@THREAD_SETTINGS
@given(threads(), st.data())
def test_the_schema_check_refuses_exactly_what_a_reader_cannot_decode(doc: dict[str, Any], data: st.DataObject) -> None:
    events = events_from_thread(from_builtins(doc, m.Thread))
    bodies = [_codec.encode_body(ev) for ev in events]
    for body in bodies:
        assert _outcome(_codec._check_dec, body) == ("ok", "") == _outcome(_codec._event_dec, body)

    tree = msgspec.msgpack.decode(data.draw(st.sampled_from(bodies)))
    path = data.draw(st.sampled_from(_paths(tree)))
    op = data.draw(st.sampled_from(["replace", "remove", "add"]))
    parent: Any = tree
    for step in path[:-1]:
        parent = parent[step]
    if not path:
        tree = data.draw(_new_values)
    elif op == "replace" or not isinstance(parent, dict):
        parent[path[-1]] = data.draw(_new_values)
    elif op == "remove":
        del parent[path[-1]]
    else:
        parent[data.draw(st.text(max_size=8))] = data.draw(_new_values)
    body = msgspec.msgpack.encode(tree)
    assert _outcome(_codec._check_dec, body) == _outcome(_codec._event_dec, body)


def test_the_schema_check_leaves_any_values_undecoded() -> None:
    """What makes it cheap: a tool return's content is not built into Python objects."""
    started = ThreadStarted(thread_id="t", created_at="2026-01-01T00:00:00Z")
    assert isinstance(_codec._check_dec.decode(_codec.encode_body(started)), msgspec.Struct)
    part = m.ToolReturnPart(tool_name="q", tool_call_id="c", status="success", content={"rows": [1, 2, 3]},
                            metadata={"m": [{}]})
    msg = m.RequestMessage(timestamp="2026-01-01T00:00:00Z", agent_id="a", parts=[part])
    checked = _codec._check_dec.decode(_codec.encode_body(MessageRecorded(message=msg)))
    got = checked.message.parts[0]
    assert isinstance(got.content, msgspec.Raw) and isinstance(got.metadata, msgspec.Raw)
    assert msgspec.msgpack.decode(got.content) == {"rows": [1, 2, 3]}
