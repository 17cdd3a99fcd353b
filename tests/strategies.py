"""Hypothesis strategies for ThreadProtocol documents, as JSON builtins.

:func:`threads` draws valid v0.0.4 documents (plain dicts/lists/str/int/float/
bool/None, exactly what ``json.loads`` would give) that exercise the lossless
paths of the model:

- every optional field is independently absent, explicit ``null`` or a value;
- every protocol object may carry unknown fields (``x-*``, ``meta:*``, random
  names) holding arbitrary JSON;
- message parts include ``custom:*`` / ``meta:*`` / other unknown part kinds;
  user-prompt content includes unknown user-content kinds;
- system messages use normative ``data-tp-*``, ``data-app-*``, ``data-sys-*``,
  other ``data-*``, ``meta:*`` and free-form event types;
- agent turns reference agents of the registry; interrupted turns carry an
  ``interruption`` and no ``completed_at``.

Integers stay within ±(2**53-1) and strings contain no lone surrogates, so
every drawn document also has an RFC 8785 canonical form (hashable).
Keyword options narrow the output for properties that need it (see
:func:`threads`). :func:`threads_v003` draws v0.0.3 documents.
"""

from __future__ import annotations

import base64
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = [
    "EVENT_TYPES_V003_NORMATIVE",
    "EVENT_TYPES_V004_NORMATIVE",
    "THREAD_SETTINGS",
    "json_keys",
    "json_scalars",
    "json_values",
    "message_parts",
    "system_messages",
    "thread_models",
    "threads",
    "threads_v003",
]

MAX_SAFE = 2**53 - 1

EVENT_TYPES_V004_NORMATIVE = (
    "data-tp-agent_handoff",
    "data-tp-thread_spawn",
    "data-tp-thread_merge",
    "data-tp-thread_end",
    "data-tp-error",
)
EVENT_TYPES_V003_NORMATIVE = ("agent.handoff", "thread.spawn", "thread.merge", "thread.end", "error")

# --------------------------------------------------------------------------- JSON values

_text_chars = st.characters(blacklist_categories=("Cs",))  # no lone surrogates
short_text = st.text(_text_chars, max_size=12)
#: Object keys: mostly short text, sometimes astral / control characters.
json_keys = st.one_of(
    st.text(_text_chars, max_size=6),
    st.sampled_from(["a", "b", "A", "é", "\U0001f600", "\ufb33", "\x00", "\n", "meta:k", "meta:"]),
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-MAX_SAFE, MAX_SAFE),
    st.floats(allow_nan=False, allow_infinity=False),
    short_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(json_keys, inner, max_size=3)),
    max_leaves=8,
)

timestamps = st.one_of(
    st.datetimes().map(lambda d: d.isoformat() + "Z"),
    st.sampled_from(["2025-01-20T10:00:00Z", "2025-01-20T10:00:15.123+02:00"]),
)
ids = st.one_of(st.uuids().map(str), st.text(_text_chars, min_size=1, max_size=8))

# --------------------------------------------------------------------------- object builder

_EXTRA_KEYS = st.one_of(
    st.sampled_from(["x-vendor", "x-trace", "meta:trace", "meta:cache-hit", "_debug", "custom:note", "extra"]),
    json_keys,
)


def _obj(
    required: dict[str, st.SearchStrategy[Any]],
    optional: dict[str, st.SearchStrategy[Any]] | None = None,
    *,
    tag: tuple[str, str] | None = None,
    extras: bool = True,
    nullable: bool = True,
) -> st.SearchStrategy[dict[str, Any]]:
    """A dict with all ``required`` keys, each ``optional`` key absent / null / a value, unknown extras."""
    optional = dict(optional or {})
    if nullable:
        optional = {k: st.one_of(st.none(), v) for k, v in optional.items()}
    known = set(required) | set(optional) | ({tag[0]} if tag else set())
    base = st.fixed_dictionaries(required, optional=optional)
    extra = (
        st.dictionaries(_EXTRA_KEYS.filter(lambda k: k not in known), json_values, max_size=2)
        if extras
        else st.just({})
    )

    def merge(t: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
        out = {**t[1], **t[0]}
        if tag:
            out[tag[0]] = tag[1]
        return out

    return st.tuples(base, extra).map(merge)


# --------------------------------------------------------------------------- parts and content

usage = _obj(
    {}, {k: st.integers(0, MAX_SAFE) for k in ("input_tokens", "output_tokens", "thinking_tokens", "total_tokens")}
)
content_ref = _obj(
    {"uri": st.sampled_from(["s3://b/k", "https://example.com/x", "file:///tmp/x"])},
    {"size_bytes": st.integers(0, MAX_SAFE), "hash": short_text, "media_type": short_text},
)
binary_content = _obj(
    {"data": st.binary(max_size=8).map(lambda b: base64.b64encode(b).decode()), "media_type": short_text},
    {"identifier": short_text, "vendor_metadata": json_values},
    tag=("kind", "binary"),
)


def _file_url(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    return _obj(
        {"url": short_text},
        {
            "identifier": short_text,
            "force_download": st.booleans(),
            "vendor_metadata": json_values,
            "media_type": short_text,
        },
        tag=("kind", kind),
    )


_KNOWN_CONTENT_KINDS = {"image-url", "audio-url", "video-url", "document-url", "binary"}
unknown_content = st.tuples(
    st.one_of(st.sampled_from(["custom:widget", "meta:hint", "text-url"]), short_text).filter(
        lambda k: k not in _KNOWN_CONTENT_KINDS
    ),
    st.dictionaries(_EXTRA_KEYS.filter(lambda k: k != "kind"), json_values, max_size=3),
).map(lambda t: {**t[1], "kind": t[0]})
user_content = st.one_of(
    short_text,
    *(_file_url(k) for k in ("image-url", "audio-url", "video-url", "document-url")),
    binary_content,
    unknown_content,
)

_KNOWN_PART_KINDS = {"user-prompt", "text", "thinking", "tool-call", "tool-return", "retry-prompt", "file"}
user_prompt_part = _obj(
    {"content": st.one_of(short_text, st.lists(user_content, max_size=3))}, tag=("part_kind", "user-prompt")
)
text_part = _obj({"content": short_text}, {"id": short_text}, tag=("part_kind", "text"))
thinking_part = _obj(
    {"provider_name": short_text},
    {"content": short_text, "signature": short_text, "thinking_id": short_text},
    tag=("part_kind", "thinking"),
)
tool_call_part = _obj(
    {"tool_name": short_text, "tool_call_id": short_text}, {"args": json_values}, tag=("part_kind", "tool-call")
)
tool_return_part = _obj(
    {
        "tool_name": short_text,
        "tool_call_id": short_text,
        "status": st.sampled_from(["success", "error", "validation_error"]),
    },
    {"content": json_values, "content_ref": content_ref, "metadata": json_values},
    tag=("part_kind", "tool-return"),
)
retry_prompt_part = _obj(
    {"content": st.one_of(short_text, st.lists(json_values, max_size=2))},
    {"tool_name": short_text, "tool_call_id": short_text},
    tag=("part_kind", "retry-prompt"),
)
file_part = _obj({"content": binary_content}, {"id": short_text}, tag=("part_kind", "file"))
extension_part = st.tuples(
    st.one_of(
        st.sampled_from(["custom:planning-graph", "custom:vector-store-call", "meta:cache-hit", "meta:x"]),
        short_text,
    ).filter(lambda k: k not in _KNOWN_PART_KINDS),
    st.dictionaries(_EXTRA_KEYS.filter(lambda k: k != "part_kind"), json_values, max_size=3),
).map(lambda t: {**t[1], "part_kind": t[0]})

#: Any message part, normative or extension.
message_parts = st.one_of(
    user_prompt_part,
    text_part,
    thinking_part,
    tool_call_part,
    tool_return_part,
    retry_prompt_part,
    file_part,
    extension_part,
)

# --------------------------------------------------------------------------- messages and turns


def _event_types(v003: bool, allow_v003_names: bool) -> st.SearchStrategy[str]:
    normative = EVENT_TYPES_V003_NORMATIVE if v003 else EVENT_TYPES_V004_NORMATIVE
    other = st.one_of(
        st.builds(lambda s: "data-app-" + s, short_text),
        st.builds(lambda s: "data-sys-" + s, short_text),
        st.builds(lambda s: "data-" + s, short_text),
        st.builds(lambda s: "meta:" + s, short_text),
        st.sampled_from(["tool.grant", "ui.update", "context.switch"]),
        short_text,
    )
    # A v0.0.4 doc may legally use a v0.0.3 name as a custom event; such names do not
    # survive upgrade(downgrade(x)) (documented collision), so they are optional.
    other_names = set(EVENT_TYPES_V004_NORMATIVE if v003 else EVENT_TYPES_V003_NORMATIVE)
    if not allow_v003_names:
        other = other.filter(lambda e: e not in other_names)
    return st.one_of(st.sampled_from(normative), other)


def system_messages(*, v003: bool = False, allow_foreign_names: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    """A ``message_type: "system"`` message."""
    return _obj(
        {"timestamp": timestamps, "event_type": _event_types(v003, allow_foreign_names)},
        {"event_data": json_values, "source_agent": short_text, "target_agents": st.lists(short_text, max_size=2)},
        tag=("message_type", "system"),
    )


def _thread_message(kind: str, agent_ids: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return _obj(
        {"timestamp": timestamps, "parts": st.lists(message_parts, max_size=3), "agent_id": st.sampled_from(agent_ids)},
        {
            "model_name": short_text,
            "provider_name": short_text,
            "provider_response_id": short_text,
            "usage": usage,
            "finish_reason": st.sampled_from(["stop", "length", "content_filter", "tool_call", "error"]),
        },
        tag=("message_type", kind),
    )


def _user_turn() -> st.SearchStrategy[dict[str, Any]]:
    return _obj(
        {"submitted_at": timestamps, "parts": st.lists(message_parts, min_size=1, max_size=3)},
        {"client_metadata": st.dictionaries(json_keys, json_values, max_size=3)},
        tag=("turn_type", "user"),
    )


@st.composite
def _agent_turn(
    draw: st.DrawFn, agent_ids: list[str], *, v003: bool, interrupted: bool, allow_foreign_names: bool
) -> dict[str, Any]:
    messages = st.lists(
        st.one_of(
            _thread_message("request", agent_ids),
            _thread_message("response", agent_ids),
            system_messages(v003=v003, allow_foreign_names=allow_foreign_names),
        ),
        max_size=3,
    )
    status = "complete"
    if not v003 and interrupted:
        status = draw(st.sampled_from(["complete", "interrupted"]))
    optional: dict[str, st.SearchStrategy[Any]] = {"total_usage": usage}
    required: dict[str, st.SearchStrategy[Any]] = {
        "agent_id": st.sampled_from(agent_ids),
        "started_at": timestamps,
        "messages": messages,
    }
    if v003:
        required["completed_at"] = timestamps
    elif status == "complete":
        required["completion_status"] = st.just("complete")
        optional["completed_at"] = timestamps
    else:
        required["completion_status"] = st.just("interrupted")
        required["interruption"] = _obj(
            {
                "reason": st.sampled_from(["user_cancelled", "timeout", "network_failure", "safety_halt", "error"]),
                "interrupted_at": timestamps,
            }
        )
    return draw(_obj(required, optional, tag=("turn_type", "agent")))


@st.composite
def _thread(draw: st.DrawFn, *, v003: bool, interrupted: bool, allow_foreign_names: bool) -> dict[str, Any]:
    agent_ids = draw(st.lists(ids, min_size=1, max_size=3, unique=True))
    agents = {
        aid: draw(
            _obj(
                {"agent_id": st.just(aid), "agent_name": short_text, "created_at": timestamps},
                {"model_name": short_text, "provider_name": short_text, "config_ref": short_text},
            )
        )
        for aid in agent_ids
    }
    turn = st.one_of(
        _user_turn(),
        _agent_turn(agent_ids, v003=v003, interrupted=interrupted, allow_foreign_names=allow_foreign_names),
    )
    link = _obj(
        {
            "thread_id": st.uuids().map(str),
            "relation": st.sampled_from(["spawned_from", "merged_from", "referenced", "x"]),
        },
        {"metadata": json_values},
    )
    return draw(
        _obj(
            {
                "version": st.just("0.0.3" if v003 else "0.0.4"),
                "thread_id": st.uuids().map(str),
                "created_at": timestamps,
                "updated_at": timestamps,
                "agents": st.just(agents),
                "turns": st.lists(turn, max_size=4),
            },
            {
                "title": short_text,
                "metadata": st.dictionaries(json_keys, json_values, max_size=3),
                "relationships": _obj({}, {"links": st.lists(link, max_size=2)}),
            },
        )
    )


def threads(*, interrupted: bool = True, allow_v003_names: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    """Valid v0.0.4 ThreadProtocol documents as JSON builtins.

    ``interrupted=False``: every agent turn is ``completion_status: "complete"``.
    ``allow_v003_names=False``: no custom event is named like a v0.0.3 normative
    event (``error``, ``agent.handoff``, ...), the documented collision of
    :mod:`tplog.protocol.versions`.
    """
    return _thread(v003=False, interrupted=interrupted, allow_foreign_names=allow_v003_names)


def threads_v003(*, allow_v004_names: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    """Valid v0.0.3 documents: no ``completion_status``, v0.0.3 normative event names."""
    return _thread(v003=True, interrupted=False, allow_foreign_names=allow_v004_names)


def thread_models(**kwargs: Any) -> st.SearchStrategy[Any]:
    """:func:`threads` decoded into :class:`tplog.Thread` objects."""
    from tplog.protocol.json import from_builtins
    from tplog.protocol.model import Thread

    return threads(**kwargs).map(lambda d: from_builtins(d, Thread))


#: Hypothesis settings for properties over whole threads: no per-example deadline
#: (a large drawn thread can take longer than the 200 ms default on a slow CI box).
THREAD_SETTINGS = settings(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], max_examples=100
)
