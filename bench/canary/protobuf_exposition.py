"""The protobuf exposition (io.prometheus.client.MetricFamily), only what the Istio source writes.

The text format cannot carry a native histogram and no package here writes the protobuf
one, so the few fields needed are encoded by hand (field numbers from metrics.proto).
`histogram_message` encodes one arm's histogram (`istio_source.Arm`): its classic buckets
and, where the arm keeps one, its native buckets as spans and deltas.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

ZERO_THRESHOLD = 2.938735877055719e-39  # the Go client's default zero bucket width


def varint(n: int) -> bytes:
    """An unsigned varint (a length, a tag, a count)."""
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def field(number: int, kind: str, value: object) -> bytes:
    """One field of a protobuf message: `kind` is varint, sint, double, string or bytes."""
    if kind == "varint":
        return varint(number << 3) + varint(int(value))  # type: ignore[arg-type]
    if kind == "sint":
        return varint(number << 3) + varint(_zigzag(int(value)))  # type: ignore[arg-type]
    if kind == "double":
        return varint(number << 3 | 1) + struct.pack("<d", float(value))  # type: ignore[arg-type]
    data = value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[arg-type]
    return varint(number << 3 | 2) + varint(len(data)) + data


def message(*fields: tuple[int, str, object]) -> bytes:
    """A message of (number, kind, value) fields, in order."""
    return b"".join(field(n, k, v) for n, k, v in fields)


def metric(labels: dict[str, str], *, counter: bytes = b"", histogram: bytes = b"") -> bytes:
    """A Metric: its labels and a counter or histogram message."""
    out = b"".join(
        field(1, "bytes", message((1, "string", k), (2, "string", v))) for k, v in labels.items()
    )
    if counter:
        out += field(3, "bytes", counter)
    if histogram:
        out += field(7, "bytes", histogram)
    return out


def histogram_message(a: Any) -> bytes:
    """An arm's Histogram message: count, sum, classic buckets and any native buckets."""
    out = message((1, "varint", a.count), (2, "double", a.sum_ms))
    for bound, c in zip(a.bounds, np.cumsum(a.buckets), strict=False):
        out += field(3, "bytes", message((1, "varint", int(c)), (2, "double", bound)))
    if a.native_schema is None:
        return out
    out += message(
        (5, "sint", a.native_schema),
        (6, "double", ZERO_THRESHOLD),
        (7, "varint", a.zero_count),
    )
    # Spans of consecutive indices, then each bucket's count as a delta from the previous one.
    previous_index: int | None = None
    previous_count = 0
    spans: list[tuple[int, int]] = []
    deltas: list[int] = []
    for index in sorted(a.native):
        if previous_index is None:
            spans.append((index, 1))
        elif index == previous_index + 1:
            spans[-1] = (spans[-1][0], spans[-1][1] + 1)
        else:
            spans.append((index - previous_index - 1, 1))
        deltas.append(a.native[index] - previous_count)
        previous_index, previous_count = index, a.native[index]
    for offset, length in spans:
        out += field(12, "bytes", message((1, "sint", offset), (2, "varint", length)))
    for delta in deltas:
        out += field(13, "sint", delta)
    return out
