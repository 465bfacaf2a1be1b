"""Golden bytes: the canonical entry and its hash never change, so chains already written verify.

The literals below were computed once and are checked against an independent
recomputation (the `rfc8785` library and hashlib), so a change to how Kiln builds
the canonical entry that alters a single byte fails here before it reaches a chain.
"""

from __future__ import annotations

import hashlib
import json

import rfc8785

from audit import chain

EVENT_ID = "3f1c2a9e-0000-4000-8000-00000000abcd"
RECORDED_AT = "2026-11-30T06:00:00.123456Z"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
DATA = {
    "reason": "looks good",
    "n": 3,
    "nested": {"z": [1, 2.5, None, True]},
    "ünï": "Zürich € \u2028 😀",
    "ctrl": 'tab\t\u0001"\\',
}
# JCS of DATA: keys sorted by UTF-16 code units, only `"`, `\` and controls escaped (RFC 8785 3.2.2.2).
DATA_JCS = (
    '{"ctrl":"tab\\t\\u0001\\"\\\\","n":3,"nested":{"z":[1,2.5,null,true]},'
    '"reason":"looks good","ünï":"Zürich € \u2028 😀"}'
)
ENTRY_BYTES = (
    b'{"action":"portal.environment.approved","actor":"alice","data":{"ctrl":"tab\\t\\u0001\\"\\\\",'
    b'"n":3,"nested":{"z":[1,2.5,null,true]},"reason":"looks good",'
    b'"\xc3\xbcn\xc3\xaf":"Z\xc3\xbcrich \xe2\x82\xac \xe2\x80\xa8 \xf0\x9f\x98\x80"},'
    b'"event_id":"3f1c2a9e-0000-4000-8000-00000000abcd","recorded_at":"2026-11-30T06:00:00.123456Z",'
    b'"seq":7,"target":"portal.environmentrequest:42","trace_id":"0af7651916cd43dd8448eb211c80319c"}'
)
PREV = "ab" * 32
ENTRY_HASH = "590fca69c3927c98bc74ce9eb517f133da2f843161ce3eba2490f51fe8f713b7"

# A three-entry chain as it was written (one entry whose strings need escaping).
CHAIN_EVENTS = [
    (
        "3f1c2a9e-0000-4000-8000-000000000001",
        "2026-11-30T06:00:00.000001Z",
        "alice",
        "portal.environment.approved",
        "portal.environmentrequest:42",
        '{"n":3,"reason":"looks good"}',
        TRACE_ID,
    ),
    (
        "3f1c2a9e-0000-4000-8000-000000000002",
        "2026-11-30T06:00:01.500000Z",
        'a,"b"\nc\\d',
        "canary.rollout.promoted",
        "tab\there ünïcødé 😀",
        '{"n":[1,2.5],"s":"x\\n\\"y\\"\\u0001"}',
        "",
    ),
    (
        "3f1c2a9e-0000-4000-8000-000000000003",
        "2026-11-30T06:00:02.999999Z",
        "system:reaper",
        "chaos.experiment.stopped",
        "chaos.experiment:7",
        "{}",
        "",
    ),
]
CHAIN_HASHES = [
    "e72cc48b09c562e450576e83fc02210a241f79f433e0bac85f31c8f1f0045f7d",
    "5a09ac685a2e92dba06e3cc4c92573c79a69ec44652918ab18fcc2152f3398fc",
    "114fe70cbf8b15c1f76542b4192f32eb02b8818aa599a2dd1c08216002f19a83",
]


def _independent_hash(prev: str, seq: int, event: tuple) -> str:
    """SHA-256(prev hex ASCII || JCS(entry)) with nothing from Kiln: the `rfc8785` library."""
    event_id, recorded_at, actor, action, target, data_jcs, trace_id = event
    entry = {
        "action": action,
        "actor": actor,
        "data": json.loads(data_jcs),
        "event_id": event_id,
        "recorded_at": recorded_at,
        "seq": seq,
        "target": target,
        "trace_id": trace_id,
    }
    return hashlib.sha256(prev.encode("ascii") + rfc8785.dumps(entry)).hexdigest()


def test_golden_data_text_and_entry_bytes_and_hash():
    assert chain.canonical_data(DATA) == DATA_JCS == rfc8785.dumps(DATA).decode()
    got = chain.entry_bytes(
        7, EVENT_ID, RECORDED_AT, "alice", "portal.environment.approved",
        "portal.environmentrequest:42", DATA_JCS, TRACE_ID,
    )  # fmt: skip
    assert got == ENTRY_BYTES
    assert hashlib.sha256(PREV.encode("ascii") + ENTRY_BYTES).hexdigest() == ENTRY_HASH
    event = (EVENT_ID, RECORDED_AT, "alice", "portal.environment.approved",
             "portal.environmentrequest:42", DATA_JCS, TRACE_ID)  # fmt: skip
    assert _independent_hash(PREV, 7, event) == ENTRY_HASH


def test_golden_chain_is_rebuilt_byte_for_byte_and_verifies():
    # The literal hashes agree with an independent JCS implementation...
    prev = chain.GENESIS_HASH
    for seq, (event, digest) in enumerate(zip(CHAIN_EVENTS, CHAIN_HASHES, strict=True), 1):
        assert _independent_hash(prev, seq, event) == digest
        prev = digest
    # ...chaining the same events writes exactly those hashes...
    entries = list(chain.build_entries(0, chain.GENESIS_HASH, CHAIN_EVENTS))
    assert [e.hash for e in entries] == CHAIN_HASHES
    # ...and the verifier accepts the chain as stored, with a checkpoint on its head.
    rows = [
        (seq, *event[:7], prev, digest)
        for seq, event, prev, digest in zip(
            (1, 2, 3),
            CHAIN_EVENTS,
            [chain.GENESIS_HASH, *CHAIN_HASHES[:2]],
            CHAIN_HASHES,
            strict=True,
        )
    ]
    state, problem = chain.verify_rows(rows, expect_hash_at={3: CHAIN_HASHES[2]})
    assert problem is None and state.checked == 3
    # One byte changed in a stored field is caught.
    edited = list(rows[1])
    edited[5] = edited[5].replace("ü", "u")
    _, problem = chain.verify_rows([rows[0], tuple(edited), rows[2]])
    assert problem is not None and problem.seq == 2


def test_an_export_line_is_the_canonical_entry_with_its_type_and_hashes_around_it():
    from audit.export.lines import _event_line

    row = (7, EVENT_ID, RECORDED_AT, "alice", "portal.environment.approved",
           "portal.environmentrequest:42", DATA_JCS, TRACE_ID, PREV, ENTRY_HASH)  # fmt: skip
    line = _event_line(row).encode()
    prefix, suffix = (
        b'{"type":"event",',
        f',"prev_hash":"{PREV}","hash":"{ENTRY_HASH}"}}\n'.encode(),
    )
    assert line.startswith(prefix) and line.endswith(suffix)
    assert b"{" + line[len(prefix) : -len(suffix)] + b"}" == ENTRY_BYTES
    doc = json.loads(line)
    assert doc["data"] == DATA and (doc["seq"], doc["hash"]) == (7, ENTRY_HASH)
