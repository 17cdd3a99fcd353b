"""The link-index rows the contract's helpers decide, on every backend in FACTORIES: how a
children row spells a child named in several cases (:func:`tplog.backends.common.child_spelling`),
and one incoming row per declared link, repeated ones too (:func:`tplog.backends.common.outgoing`'s
ordinals), before and after a rebuild.

Written for the survivors of tplog/backends/contract.py's mutation run (tests/MUTANTS.md).
"""

from __future__ import annotations

import pytest
from conftest import agent_start, completed, link, spawn_message, started
from contract_helpers import (
    append,
    part,
    rec_fixture,  # noqa: F401  (the `rec` fixture)
    tid,
)

from tplog.backends.contract import Recorder
from tplog.protocol import model as m


def rebuilt(rec: Recorder) -> Recorder:
    reports = rec.rebuild(["links"], verify=True)
    assert [r.differences for r in reports] == [[]]
    rec.rebuild(["links"])
    return rec


def test_a_child_named_only_by_spawn_facts_is_spelled_as_the_latest_names_it(rec: Recorder) -> None:
    p, c = tid(), tid()
    append(rec, part(p, [started(p), agent_start(), spawn_message(c.upper()), completed(),
                         agent_start(), spawn_message(c), completed()]))
    assert rec.children(p) == [c]
    assert rebuilt(rec).children(p) == [c]
    append(rec, part(p, [agent_start(), spawn_message(c.upper()), completed()]))
    assert rec.children(p) == [c.upper()]
    assert rebuilt(rec).children(p) == [c.upper()]


@pytest.mark.parametrize("link_first", [True, False])
def test_a_child_with_its_own_spawned_from_link_keeps_its_own_spelling(rec: Recorder, link_first: bool) -> None:
    p, c = tid(), tid()
    own = c[:18].upper() + c[18:]  # the child's head spells it so
    child = part(own, [started(own, relationships=m.ThreadRelationships(
        links=[m.ThreadLink(thread_id=p, relation="spawned_from")]))])
    parent = part(p, [started(p), agent_start(), spawn_message(c), spawn_message(c.upper()), completed()])
    for x in ((child, parent) if link_first else (parent, child)):
        append(rec, x)
    assert rec.children(p) == [own]
    assert rebuilt(rec).children(p) == [own]
    append(rec, part(p, [agent_start(), spawn_message(c.lower()), completed()]))
    assert rec.children(p) == [own]


def test_every_declared_link_is_an_incoming_row_repeated_ones_too(rec: Recorder) -> None:
    a, b = tid(), tid()
    declared = [m.ThreadLink(thread_id=b, relation="cites"), m.ThreadLink(thread_id=b, relation="cites"),
                m.ThreadLink(thread_id=b, relation="answers")]
    append(rec, part(a, [started(a, relationships=m.ThreadRelationships(links=declared)), link(b, "cites")]))
    want = [(a, "answers"), (a, "cites"), (a, "cites"), (a, "cites")]
    assert rec.incoming(b) == want
    assert rec.incoming(b, relation="cites") == want[1:]
    assert rebuilt(rec).incoming(b) == want
    head = rec.head(a)
    assert head is not None and head.links == 4
