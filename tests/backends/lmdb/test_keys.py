"""The LMDB key layouts of scoped rows (tplog/backends/lmdb/keys.py), pinned to their bytes.

A store keeps these keys on disk: a scope tag or scoped event-id key derived differently by a
later tplog would orphan every scoped row written before (listings and event-id lookups would
find nothing). So the derivation is pinned to the bytes this format has always produced, and the
rows of a real scoped store are checked to use them.
"""

from __future__ import annotations

from pathlib import Path

from conftest import ToyStore as Store
from conftest import started, user

from tplog.backends.lmdb.keys import UNSCOPED_TAG, eid_key, scope_tag

# BLAKE2b-8(b"tplog-scope-tag:" + scope): the 8-byte tag of the scope "acme".
ACME_TAG = bytes.fromhex("2b8fadf2dd372033")


def test_scope_tags_and_scoped_event_id_keys_keep_their_bytes() -> None:
    assert scope_tag("acme") == ACME_TAG and len(scope_tag("other")) == 8
    assert scope_tag(None) == UNSCOPED_TAG == b"\x00" * 8
    assert eid_key("e1", "acme") == b"\xff" + ACME_TAG + b"e1"  # 0xFF: never the start of valid UTF-8
    assert eid_key("e1", None) == b"e1"


def test_a_scoped_store_writes_those_keys(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.scoped("acme").append("t", [started("t"), user("hi")], event_ids=["e1", "e2"])
        s.append("t", [started("t")], event_ids=["e1"])  # the same ids unscoped: other rows
        with s.backend.engine.read() as txn:
            eids = [bytes(k) for k, _ in txn.range("eventids")]
            updated = [bytes(k) for k, _ in txn.range("updated")]
    assert eids == [b"e1", b"\xff" + ACME_TAG + b"e1", b"\xff" + ACME_TAG + b"e2"]
    assert sorted(k[:8] for k in updated) == [UNSCOPED_TAG, ACME_TAG]
