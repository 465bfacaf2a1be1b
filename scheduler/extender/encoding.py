"""Fixed-width JSON for the extender's long answers: per-node items encoded once, gathered as bytes.

kube-scheduler sends up to every node's name per call and reads as many back
(`NodeNames` in an ExtenderFilterResult, one `HostPriority` per candidate). A
dict per node handed to orjson was most of a call's time at 12k nodes; here
each node's JSON item is encoded once per snapshot at one width, and an answer
is a numpy gather of those items. Kept for one measured target: the extender's
HTTP p99 <= 10 ms at 12,477 nodes (docs/scheduler.md shows the runs). Every
function returns bytes that decode to what orjson writes for the same data;
tests hold the two equal, names that need escaping included.
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np
import orjson

from scheduler.scoring import MAX_EXTENDER_PRIORITY

# Fixed-width items may be at most this much longer, in all, than unpadded ones.
PAD_LIMIT = 0.10
NAME, HOST, KEY = "name", "host", "key"

_HOST_SCORE = '{{"Host":"{}","Score":{}}}'.format
# The closing of a HostPriority per score: '7},', '10},'.
_SCORE_SUFFIX = np.array(
    [f"{s}}},".encode() for s in range(MAX_EXTENDER_PRIORITY + 1)], dtype=np.bytes_
)
# The same, left-padded with spaces to one width: ' 7},', '10},'.
_SCORE_ITEM = np.array([s.rjust(_SCORE_SUFFIX.itemsize) for s in _SCORE_SUFFIX.tolist()])
# The same as raw bytes (numpy's V dtype), for `take`.
_SCORE_RAW = _SCORE_ITEM.view(f"V{_SCORE_ITEM.itemsize}")


def names_are_plain(names: list[str]) -> bool:
    """Whether no name needs JSON escaping (orjson then adds only quotes, commas, brackets)."""
    if not names:
        return True
    return len(orjson.dumps(names)) == len("".join(names).encode()) + 3 * len(names) + 1


def pick(names: list[str], positions: np.ndarray) -> list[str]:
    """names at the given positions, in order (one C-level call instead of a loop)."""
    if positions.shape[0] == 0:
        return []
    if positions.shape[0] == 1:
        return [names[int(positions[0])]]
    return list(itemgetter(*positions.tolist())(names))


def json_array(items: np.ndarray) -> bytes:
    """A JSON array from fixed-width items that each end with a comma (the last one's is dropped)."""
    if items.shape[0] == 0:
        return b"[]"
    # Joined from the array's own buffer: one copy of the answer instead of two.
    return b"".join((b"[", items.view(np.uint8)[:-1], b"]"))


def _item(encoded_name: bytes, kind: str) -> bytes:
    """One node's JSON item: '"<name>",' (NAME), '{"Host":"<name>","Score":' (HOST) or
    '"<name>":' (KEY, an object member's opening)."""
    if kind == NAME:
        return encoded_name + b","
    if kind == KEY:
        return encoded_name + b":"
    return b'{"Host":' + encoded_name + b',"Score":'


def padded_items(names: list[str], kind: str) -> np.ndarray | None:
    """Per node, its JSON item (see `_item`) at one width, left-padded with spaces.

    Spaces before an item are JSON whitespace, so gathered items need no
    clean-up pass. None when padding every item to the longest would add more
    than PAD_LIMIT of the bytes (very uneven names).
    """
    items = [_item(orjson.dumps(name), kind) for name in names]
    width = max(map(len, items), default=0)
    if not items or width * len(items) > sum(map(len, items)) * (1 + PAD_LIMIT):
        return None
    return np.array([item.rjust(width) for item in items], dtype=f"S{width}")


def host_entries(names: list[str]) -> np.ndarray:
    """Per node, the opening of its HostPriority as NUL-padded fixed-width bytes (numpy's S dtype)."""
    return np.array([_item(orjson.dumps(name), HOST) for name in names] or [b""], dtype=np.bytes_)


def encode_map(
    names: list[str] | None,
    groups: list[tuple[np.ndarray, str]],
    plain: bool,
    keys: np.ndarray | None = None,
    rows: np.ndarray | None = None,
) -> bytes:
    """A JSON object {name: reason} over (positions, reason) groups, in group order.

    With `keys` (`padded_items(..., KEY)` of the snapshot) and `rows` (each
    position's row in it), a group whose names are all known is a gather of
    their pre-encoded keys beside the one encoded reason: for the varied-list
    HTTP p99 <= 10 ms target, a latency-sensitive pod's FailedAndUnresolvableNodes
    over the 6,004 spot nodes of a 12,000-name list took 0.40-0.72 -> 0.09-0.23 ms
    (micro-benchmark on snapshot seed 7, best of 7, the shared machine loaded). Other groups of plain names (nothing
    to escape) are one str.join over the names; otherwise orjson encodes a dict.
    `names` may be None when every group is known, plain and `keys` are given.
    """
    if not plain:
        assert names is not None, "names that need escaping are encoded from the names"
        mapping: dict[str, str] = {}
        for positions, reason in groups:
            mapping.update(dict.fromkeys(pick(names, positions), reason))
        return orjson.dumps(mapping)
    parts = []
    for positions, reason in groups:
        if positions.shape[0] == 0:
            continue
        value = orjson.dumps(reason)
        found = rows.take(positions) if keys is not None and rows is not None else None
        if found is not None and found.min() >= 0:
            out = np.empty(
                found.shape[0],
                dtype=[("key", f"V{keys.itemsize}"), ("value", f"V{len(value) + 1}")],
            )
            out["key"] = keys.view(f"V{keys.itemsize}").take(found)
            out["value"] = np.void(value + b",")
            parts.append(out.view(np.uint8)[:-1])  # joined below without a copy
            continue
        assert names is not None, "an unknown or unpadded name needs the names"
        text = value.decode()
        parts.append(('"' + f'":{text},"'.join(pick(names, positions)) + f'":{text}').encode())
    return b"{" + b",".join(parts) + b"}"


def filter_result_json(node_names: bytes, failed: bytes, unresolvable: bytes) -> bytes:
    """An ExtenderFilterResult of cache mode from its already encoded NodeNames and failure maps."""
    return b"".join(
        (
            b'{"Nodes":null,"NodeNames":',
            node_names,
            b',"FailedNodes":',
            failed,
            b',"FailedAndUnresolvableNodes":',
            unresolvable,
            b',"Error":""}',
        )
    )


def host_priorities_padded(padded: np.ndarray, idx: np.ndarray, scores: np.ndarray) -> bytes:
    """A HostPriorityList from `padded_items(..., HOST)` rows `idx` and their scores (0..10).

    The items are gathered as raw bytes (numpy's V dtype, `take`): 1.2x faster than
    fancy indexing of S items at 9,000 of 12,000 names (micro-benchmark on snapshot
    seed 7), for the varied-list HTTP p99 <= 10 ms target.
    """
    hosts = padded.view(f"V{padded.itemsize}")
    out = np.empty(idx.shape[0], dtype=[("host", hosts.dtype), ("score", _SCORE_RAW.dtype)])
    out["host"] = hosts.take(idx)
    out["score"] = _SCORE_RAW.take(scores)
    return json_array(out)


def host_priorities_unpadded(entries: np.ndarray, idx: np.ndarray, scores: np.ndarray) -> bytes:
    """A HostPriorityList from `host_entries` rows `idx`: NULs of the fixed width dropped in one pass.

    JSON text from orjson never holds a raw NUL, so every NUL is padding.
    """
    out = np.empty(idx.shape[0], dtype=[("host", entries.dtype), ("score", _SCORE_SUFFIX.dtype)])
    out["host"] = entries[idx]
    out["score"] = _SCORE_SUFFIX[scores]
    return b"[" + out.tobytes().replace(b"\x00", b"")[:-1] + b"]"


def host_priorities(names: list[str], scores: list[int]) -> bytes:
    """A HostPriorityList from names and scores, for names no snapshot has pre-encoded."""
    if not names_are_plain(names):
        return orjson.dumps([{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)])
    return f"[{','.join(map(_HOST_SCORE, names, scores))}]".encode()
