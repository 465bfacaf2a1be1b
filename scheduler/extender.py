"""kube-scheduler's HTTP extender protocol (`k8s.io/kube-scheduler/extender/v1`), pure Python.

Go writes these structs without JSON tags, so the keys are the Go field names:

  ExtenderArgs         {"Pod": v1.Pod, "Nodes": v1.NodeList | null, "NodeNames": [string] | null}
  ExtenderFilterResult {"Nodes": v1.NodeList | null, "NodeNames": [string] | null,
                        "FailedNodes": {name: reason}, "FailedAndUnresolvableNodes": {name: reason},
                        "Error": string}
  HostPriorityList     [{"Host": string, "Score": int64 0..10}]

Go's decoder matches keys case-insensitively; so does `parse_args`. With
`nodeCacheCapable: false` the scheduler sends full Node objects in `Nodes` and
expects the passing ones back in `Nodes`; with `true` it sends only
`NodeNames` and the extender answers from its own inventory (a `NodeSnapshot`).
A node name the inventory does not know fails (fail closed: its capacity type
cannot be proven on-demand).
"""

from __future__ import annotations

import re
import secrets
import threading
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np
import orjson

from scheduler import scoring

GPU_RESOURCE = "nvidia.com/gpu"
SPOT_LABELS = (
    ("karpenter.sh/capacity-type", "spot"),
    ("eks.amazonaws.com/capacityType", "SPOT"),
    ("cloud.google.com/gke-spot", "true"),
    ("cloud.google.com/gke-preemptible", "true"),
    ("kubernetes.azure.com/scalesetpriority", "spot"),
)
REASON_UNKNOWN_NODE = "node is not in kiln's inventory"
REASON_MALFORMED_NODE = "node object is malformed"

_QUANTITY = re.compile(
    r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
_SUFFIX = {
    None: Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


class ProtocolError(ValueError):
    """The request body is not a valid ExtenderArgs; the message says why."""


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes resource.Quantity ("250m", "1Gi", "2", "1e3") as a Decimal."""
    if isinstance(value, bool):
        raise ProtocolError(f"quantity {value!r} is not a number")
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str):
        raise ProtocolError(f"quantity {value!r} is not a string")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ProtocolError(f"quantity {value!r} is not a Kubernetes quantity")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as exc:
        raise ProtocolError(f"quantity {value!r} is not a number") from exc
    if not number.is_finite():
        raise ProtocolError(f"quantity {value!r} is not finite")
    return number * _SUFFIX[match.group(2)]


def _get(obj: dict[str, Any], key: str) -> Any:
    """Go-style case-insensitive key lookup."""
    if key in obj:
        return obj[key]
    lower = key.lower()
    for k, v in obj.items():
        if isinstance(k, str) and k.lower() == lower:
            return v
    return None


def _requests(container: Any) -> tuple[Decimal, Decimal, Decimal]:
    if not isinstance(container, dict):
        raise ProtocolError("a container is not an object")
    resources = container.get("resources") or {}
    if not isinstance(resources, dict):
        raise ProtocolError("container resources is not an object")
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    if not isinstance(requests, dict) or not isinstance(limits, dict):
        raise ProtocolError("container requests/limits is not an object")
    # Kubernetes defaults a missing request to the limit.
    cpu = parse_quantity(requests.get("cpu", limits.get("cpu", "0")))
    mem = parse_quantity(requests.get("memory", limits.get("memory", "0")))
    gpu = parse_quantity(requests.get(GPU_RESOURCE, limits.get(GPU_RESOURCE, "0")))
    return cpu, mem, gpu


def pod_request(pod: Any) -> scoring.PodRequest:
    """The effective request of a v1.Pod (cores, bytes, GPUs) and its workload class.

    Effective request = max(sum over containers, max over init containers) + overhead,
    per resource, as kube-scheduler computes it.
    """
    if not isinstance(pod, dict):
        raise ProtocolError("Pod is missing or not an object")
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if not isinstance(metadata, dict) or not isinstance(spec, dict):
        raise ProtocolError("Pod metadata/spec is not an object")
    labels = metadata.get("labels") or {}
    if not isinstance(labels, dict):
        raise ProtocolError("Pod labels is not an object")
    containers = spec.get("containers") or []
    init = spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(init, list):
        raise ProtocolError("Pod containers is not a list")
    total = [Decimal(0)] * 3
    for container in containers:
        total = [a + b for a, b in zip(total, _requests(container), strict=True)]
    for container in init:
        total = [max(a, b) for a, b in zip(total, _requests(container), strict=True)]
    overhead = spec.get("overhead") or {}
    if isinstance(overhead, dict):
        total[0] += parse_quantity(overhead.get("cpu", "0"))
        total[1] += parse_quantity(overhead.get("memory", "0"))
    return scoring.PodRequest(
        cpu=float(total[0]),
        memory=float(total[1]),
        gpu=float(total[2]),
        workload_class=scoring.workload_class_of({str(k): str(v) for k, v in labels.items()}),
    )


def is_spot(labels: dict[str, str]) -> bool:
    """Whether node labels mark spot/preemptible capacity (Karpenter, EKS, GKE, AKS)."""
    return any(labels.get(key) == value for key, value in SPOT_LABELS)


# Fixed-width JSON items may be at most this much longer, in all, than unpadded ones.
PAD_LIMIT = 0.10


def _json_array(items: np.ndarray) -> bytes:
    """A JSON array from fixed-width items that each end with a comma (the last one's is dropped)."""
    if items.shape[0] == 0:
        return b"[]"
    raw = items.tobytes()
    return b"".join((b"[", memoryview(raw)[:-1], b"]"))


# How many distinct candidate lists one snapshot keeps resolved (kube-scheduler
# repeats the same list, all nodes in cache mode, for pod after pod).
RESOLUTION_CACHE_SIZE = 8


@dataclass(eq=False)
class Resolution:
    """A candidate NodeNames list resolved against one snapshot, reused while the list repeats.

    Everything here depends only on the names and the snapshot, never on the pod:
    the row of each name (-1 unknown), the gathered scoring rows (read-only;
    unknown names are not usable), the same rows with fail-safe prices, whether
    any name needs JSON escaping, the bytes the list came in, and encoded
    FailedAndUnresolvableNodes maps keyed by the exact reason vector they encode.
    """

    names: list[str]
    idx: np.ndarray
    usable: np.ndarray
    rows: np.ndarray
    all_known: bool
    plain: bool
    # How often an equal list was resolved again (see `NodeSnapshot.resolve`).
    hits: int = 0
    # The exact bytes of the NodeNames array this list came in (b"" until verified).
    raw: bytes = b""
    _priced: np.ndarray | None = field(default=None, repr=False)
    _maps: dict[bytes, tuple[bytes, int]] = field(default_factory=dict, repr=False)

    def priced_rows(self, snapshot: NodeSnapshot) -> np.ndarray:
        """`rows` with unpriced candidates charged the highest known price (read-only)."""
        if self._priced is None:
            priced = fail_safe_prices(self.rows.copy(), snapshot)
            priced.flags.writeable = False
            self._priced = priced
        return self._priced


def _names_are_plain(names: list[str]) -> bool:
    """Whether no name needs JSON escaping (orjson then adds only quotes, commas, brackets)."""
    if not names:
        return True
    return len(orjson.dumps(names)) == len("".join(names).encode()) + 3 * len(names) + 1


@dataclass
class NodeSnapshot:
    """Kiln's inventory as arrays: names, an index by name, and the (N, 9) scoring matrix.

    A snapshot is never changed once built (a changed inventory is a new snapshot),
    so what it caches (`resolve`, `host_entries`) lives and dies with it.
    """

    names: list[str]
    matrix: np.ndarray
    index: dict[str, int] = field(default_factory=dict)
    # The highest price in the price book: what an unpriced node is charged (NaN if none).
    max_price: float = float("nan")

    # Per node, the JSON text '{"Host":"<name>","Score":' (built on first prioritize).
    _host_entries: np.ndarray | None = field(default=None, repr=False, compare=False)
    # Space-padded JSON items per node (see `padded_items`).
    _padded: dict[str, np.ndarray | None] = field(default_factory=dict, repr=False, compare=False)
    # Recently resolved candidate lists, most recent first (see `resolve`).
    _resolutions: list[Resolution] = field(default_factory=list, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {name: i for i, name in enumerate(self.names)}

    def padded_items(self, kind: str) -> np.ndarray | None:
        """Per node, one JSON array item of a fixed width, left-padded with spaces.

        kind "name": '"<name>",' (a NodeNames item); kind "host": '{"Host":"<name>","Score":'
        (the opening of a HostPriority). Spaces before an item are JSON whitespace, so
        gathered items need no clean-up pass. None when padding every item to the
        longest would add more than PAD_LIMIT of the bytes (very uneven names).
        """
        if kind not in self._padded:
            encoded = [orjson.dumps(name) for name in self.names]
            if kind == "name":
                items = [e + b"," for e in encoded]
            else:
                items = [b'{"Host":' + e + b',"Score":' for e in encoded]
            width = max(map(len, items), default=0)
            padded = None
            if items and width * len(items) <= sum(map(len, items)) * (1 + PAD_LIMIT):
                padded = np.array([item.rjust(width) for item in items], dtype=f"S{width}")
            self._padded[kind] = padded
        return self._padded[kind]

    def host_entries(self) -> np.ndarray:
        """Fixed-width bytes per node: the opening of its HostPriority object, JSON-escaped."""
        if self._host_entries is None:
            entries = [b'{"Host":' + orjson.dumps(name) + b',"Score":' for name in self.names]
            self._host_entries = np.array(entries or [b""], dtype=np.bytes_)
        return self._host_entries

    def resolve(self, names: list[str]) -> Resolution:
        """The `Resolution` of a candidate list, from the cache when an equal list was seen.

        A hit costs one C-level list comparison instead of a dict lookup per name;
        equality is exact (same names, same order), so a hit is never a guess.
        """
        n = len(names)
        with self._lock:
            for pos, cached in enumerate(self._resolutions):
                if len(cached.names) == n and cached.names == names:
                    cached.hits += 1
                    if pos:
                        self._resolutions.insert(0, self._resolutions.pop(pos))
                    return cached
        idx = np.fromiter(map(self.index.get, names, repeat(-1)), dtype=np.int64, count=n)
        usable = idx >= 0
        if len(self.names):
            rows = self.matrix[np.where(usable, idx, 0)]
        else:
            rows = np.zeros((n, len(scoring.NodeArrays.COLUMNS)))
        for array in (idx, usable, rows):
            array.flags.writeable = False
        resolution = Resolution(
            names=list(names),
            idx=idx,
            usable=usable,
            rows=rows,
            all_known=bool(usable.all()),
            plain=_names_are_plain(names),
        )
        with self._lock:
            self._resolutions.insert(0, resolution)
            del self._resolutions[RESOLUTION_CACHE_SIZE:]
        return resolution

    def remembered(self) -> list[Resolution]:
        """The cached resolutions whose raw NodeNames bytes are known, most recent first."""
        with self._lock:
            return [r for r in self._resolutions if r.raw]

    @classmethod
    def empty(cls) -> NodeSnapshot:
        """A snapshot with no nodes."""
        return cls([], np.zeros((0, len(scoring.NodeArrays.COLUMNS))))


@dataclass
class Args:
    """A parsed ExtenderArgs: the pod, which mode, candidate names and (non-cache mode) node objects.

    `resolution` is set when `parse_args` already resolved the names against
    `resolved_against` (the snapshot it was given); other snapshots resolve anew.
    """

    pod: scoring.PodRequest
    cache_mode: bool
    names: list[str]
    node_objects: list[dict[str, Any]] | None
    resolution: Resolution | None = field(default=None, repr=False, compare=False)
    resolved_against: NodeSnapshot | None = field(default=None, repr=False, compare=False)


# Raw-bytes reuse of a NodeNames list (see `parse_args`): lists shorter than this
# are cheap to decode and are not worth remembering.
RAW_NAMES_MIN = 256
# Stands in for a remembered NodeNames array so the rest of a body decodes alone;
# the per-process nonce means no body can carry it by chance.
_NAMES_PLACEHOLDER_TEXT = "kiln-cached-node-names-" + secrets.token_hex(16)
_NAMES_PLACEHOLDER = orjson.dumps(_NAMES_PLACEHOLDER_TEXT)
_NAMES_KEY_BEFORE = re.compile(rb'"NodeNames"[ \t\r\n]*:[ \t\r\n]*\Z')
_NAMES_TAIL = re.compile(rb'"NodeNames"[ \t\r\n]*:[ \t\r\n]*(\[.*\])[ \t\r\n]*\}[ \t\r\n]*\Z', re.S)
_WS = b" \t\r\n"


def _tail_end(body: bytes) -> int | None:
    """Where the value before the body's closing brace ends (None if the body does not end in '}')."""
    end = len(body)
    while end and body[end - 1] in _WS:
        end -= 1
    if not end or body[end - 1] != 0x7D:  # '}'
        return None
    end -= 1
    while end and body[end - 1] in _WS:
        end -= 1
    return end


def _decode(body: bytes | str) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ProtocolError("ExtenderArgs must be a JSON object")
    return data


def _parse_remembered(body: bytes, snapshot: NodeSnapshot) -> Args | None:
    """Args without decoding the NodeNames array, when its exact bytes were seen with this snapshot.

    kube-scheduler (Go) writes ExtenderArgs as Pod, Nodes, NodeNames: the
    candidate array is the last value of the body. If those bytes equal a
    remembered array, the rest of the body is decoded with a placeholder in its
    place; only if the placeholder then is the top-level NodeNames value are the
    remembered names used. Anything else returns None (decode the whole body).
    """
    end = _tail_end(body)
    if end is None:
        return None
    for resolution in snapshot.remembered():
        raw = resolution.raw
        start = end - len(raw)
        if start <= 0 or not body.startswith(raw, start):
            continue
        if not _NAMES_KEY_BEFORE.search(body, max(0, start - 64), start):
            continue
        try:
            data = _decode(body[:start] + _NAMES_PLACEHOLDER + body[end:])
        except ProtocolError:
            return None
        if _get(data, "NodeNames") != _NAMES_PLACEHOLDER_TEXT:
            return None
        args = _args_from(data, remembered=resolution.names)
        if args.cache_mode:
            args.resolution, args.resolved_against = resolution, snapshot
        return args
    return None


def _args_from(data: dict[str, Any], remembered: list[str] | None = None) -> Args:
    """Validate decoded ExtenderArgs; `remembered` replaces a NodeNames placeholder (already valid)."""
    pod = pod_request(_get(data, "Pod"))
    nodes = _get(data, "Nodes")
    names = _get(data, "NodeNames")
    if nodes is not None:
        if not isinstance(nodes, dict) or not isinstance(nodes.get("items", []), list):
            raise ProtocolError("Nodes must be a NodeList object with an items list")
        items = nodes.get("items") or []
        node_names = []
        for item in items:
            name = (item.get("metadata") or {}).get("name") if isinstance(item, dict) else None
            if not isinstance(name, str) or not name:
                raise ProtocolError("every node in Nodes.items needs metadata.name")
            node_names.append(name)
        return Args(pod, False, node_names, items)
    if remembered is not None:
        return Args(pod, True, remembered, None)
    if names is not None:
        # str.join runs in C and refuses anything but strings: on the hot path for 10k+ names.
        if not isinstance(names, list):
            raise ProtocolError("NodeNames must be a list of strings")
        try:
            "".join(names)
        except TypeError:
            raise ProtocolError("NodeNames must be a list of strings") from None
        return Args(pod, True, names, None)
    raise ProtocolError("ExtenderArgs needs Nodes (nodeCacheCapable: false) or NodeNames (true)")


def parse_args(body: bytes | str, snapshot: NodeSnapshot | None = None) -> Args:
    """Decode and validate an ExtenderArgs body; raise ProtocolError with the reason.

    With a `snapshot`, the names are resolved against it, and a NodeNames array
    whose exact bytes came back to this snapshot is not decoded again (kube-scheduler
    sends the same candidate list for pod after pod): the bytes are remembered the
    second time a list is seen and used from the third. The result is the same as
    decoding the whole body.
    """
    if snapshot is not None and isinstance(body, bytes):
        args = _parse_remembered(body, snapshot)
        if args is not None:
            return args
    args = _args_from(_decode(body))
    if snapshot is not None and args.cache_mode:
        args.resolution, args.resolved_against = snapshot.resolve(args.names), snapshot
        # A list that came back is likely to keep coming: remember its bytes (one more
        # decode of the array, once); a list seen once costs nothing extra.
        if (
            isinstance(body, bytes)
            and args.resolution.hits
            and len(args.names) >= RAW_NAMES_MIN
            and not args.resolution.raw
        ):
            _remember_raw(body, args.resolution)
    return args


def _remember_raw(body: bytes, resolution: Resolution) -> None:
    """Keep the bytes of the body's trailing NodeNames array if they decode to exactly these names."""
    match = _NAMES_TAIL.search(body, max(0, body.rfind(b'"NodeNames"')))
    if match is None:
        return
    raw = match.group(1)
    try:
        same = orjson.loads(raw) == resolution.names
    except ValueError:
        return
    if same:
        resolution.raw = raw


def _node_row(node: dict[str, Any], known: np.ndarray | None) -> np.ndarray:
    """A scoring row from a v1.Node object; requested (and prices) come from the inventory if known."""
    row = (
        known.copy()
        if known is not None
        else np.array([0, 0, 0, 0, 0, 0, np.nan, np.nan, 0], dtype=np.float64)
    )
    labels = (node.get("metadata") or {}).get("labels") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if not isinstance(labels, dict) or not isinstance(allocatable, dict):
        raise ProtocolError(REASON_MALFORMED_NODE)
    row[0] = float(parse_quantity(allocatable.get("cpu", "0")))
    row[1] = float(parse_quantity(allocatable.get("memory", "0")))
    row[2] = float(parse_quantity(allocatable.get(GPU_RESOURCE, "0")))
    # The labels the scheduler sent are the truth for the spot guarantee.
    spot = 1.0 if is_spot({str(k): str(v) for k, v in labels.items()}) else 0.0
    if known is not None and known[8] != spot:
        row[6] = row[7] = np.nan  # the inventory priced another capacity type: unpriced, worst risk
    row[8] = spot
    return row


def _resolution(args: Args, snapshot: NodeSnapshot) -> Resolution:
    """The resolution of the candidate names against this snapshot (parse_args may have it)."""
    if args.resolution is not None and args.resolved_against is snapshot:
        return args.resolution
    return snapshot.resolve(args.names)


def cache_index(args: Args, snapshot: NodeSnapshot) -> np.ndarray:
    """Each candidate name's row in the snapshot (-1 when unknown); cached per candidate list."""
    return _resolution(args, snapshot).idx


def candidate_rows(
    args: Args, snapshot: NodeSnapshot
) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """Scoring rows for the candidates, which positions are usable, and per-position failure reasons.

    In cache mode the rows are the resolution's (read-only, shared between calls).
    """
    n = len(args.names)
    failures: dict[int, str] = {}
    if args.cache_mode:
        resolution = _resolution(args, snapshot)
        usable = resolution.usable
        for pos in np.flatnonzero(~usable).tolist():
            failures[pos] = REASON_UNKNOWN_NODE
        return resolution.rows, usable, failures
    rows = np.zeros((n, len(scoring.NodeArrays.COLUMNS)))
    usable = np.ones(n, dtype=bool)
    for pos, (name, obj) in enumerate(zip(args.names, args.node_objects or [], strict=True)):
        i = snapshot.index.get(name)
        try:
            rows[pos] = _node_row(obj, snapshot.matrix[i] if i is not None else None)
        except ProtocolError as exc:
            usable[pos] = False
            failures[pos] = str(exc) if str(exc) == REASON_MALFORMED_NODE else REASON_MALFORMED_NODE
    return rows, usable, failures


def fail_safe_prices(rows: np.ndarray, snapshot: NodeSnapshot) -> np.ndarray:
    """Charge unpriced candidates the highest known price (price book or candidates, whichever is higher)."""
    prices = rows[:, 6]
    missing = np.isnan(prices)
    if missing.any() and not np.isnan(snapshot.max_price):
        known = prices[~missing]
        highest = max(snapshot.max_price, float(known.max())) if known.size else snapshot.max_price
        rows[:, 6] = np.where(missing, highest, prices)
    return rows


def _pick(names: list[str], positions: np.ndarray) -> list[str]:
    """names at the given positions, in order (one C-level call instead of a loop)."""
    if positions.shape[0] == 0:
        return []
    if positions.shape[0] == 1:
        return [names[int(positions[0])]]
    return list(itemgetter(*positions.tolist())(names))


# The reason code of an unknown name in the fast filter (never produced by scoring).
_UNKNOWN = -1


def filter_result(args: Args, snapshot: NodeSnapshot) -> dict[str, Any]:
    """The ExtenderFilterResult for these args against the inventory."""
    rows, usable, failures = candidate_rows(args, snapshot)
    reasons = scoring.filter_matrix(rows, args.pod)
    names = args.names
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for pos in np.flatnonzero(~usable).tolist():
        failed[names[pos]] = failures[pos]
    # One dict.fromkeys per reason: a latency-sensitive pod fails every spot node.
    for reason in np.unique(reasons[usable]).tolist():
        if reason == scoring.FIT:
            continue
        target = unresolvable if reason in scoring.UNRESOLVABLE_REASONS else failed
        positions = np.flatnonzero(usable & (reasons == reason))
        target.update(dict.fromkeys(_pick(names, positions), scoring.REASON_MESSAGES[reason]))
    passing = np.flatnonzero(usable & (reasons == scoring.FIT))
    if args.cache_mode:
        return {
            "Nodes": None,
            "NodeNames": _pick(names, passing),
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }
    objects = args.node_objects or []
    return {
        "Nodes": {"metadata": {}, "items": [objects[p] for p in passing.tolist()]},
        "NodeNames": None,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }


def _encode_map(names: list[str], groups: list[tuple[np.ndarray, str]], plain: bool) -> bytes:
    """A JSON object {name: reason} over (positions, reason) groups, in group order.

    With plain names (nothing to escape) each group is one str.join over the
    names; otherwise orjson encodes a dict.
    """
    if not plain:
        mapping: dict[str, str] = {}
        for positions, reason in groups:
            mapping.update(dict.fromkeys(_pick(names, positions), reason))
        return orjson.dumps(mapping)
    parts = []
    for positions, reason in groups:
        if positions.shape[0] == 0:
            continue
        value = orjson.dumps(reason).decode()
        parts.append('"' + f'":{value},"'.join(_pick(names, positions)) + f'":{value}')
    return ("{" + ",".join(parts) + "}").encode()


def filter_body(args: Args, snapshot: NodeSnapshot) -> tuple[bytes, int]:
    """`filter_result` as JSON bytes, and how many nodes it fails as unresolvable.

    Cache mode encodes the maps per reason without a dict per node, and reuses the
    encoded FailedAndUnresolvableNodes of the candidate list's resolution when the
    unresolvable reasons are the same (they depend on the workload class, not on
    the pod's size). Decodes to exactly `filter_result` (tests hold the two equal).
    """
    if not args.cache_mode:
        result = filter_result(args, snapshot)
        return orjson.dumps(result), len(result["FailedAndUnresolvableNodes"])
    names = args.names
    from scheduler import scoring_kernel

    resolution = _resolution(args, snapshot)
    reasons = scoring_kernel.filter_rows(resolution.rows, args.pod, resolution.usable, _UNKNOWN)
    codes = np.unique(reasons).tolist()
    unresolvable_codes = [c for c in codes if c in scoring.UNRESOLVABLE_REASONS]
    failed_groups = [
        (
            np.flatnonzero(reasons == c),
            REASON_UNKNOWN_NODE if c == _UNKNOWN else scoring.REASON_MESSAGES[c],
        )
        for c in codes
        if c != scoring.FIT and c not in scoring.UNRESOLVABLE_REASONS
    ]
    failed = _encode_map(names, failed_groups, resolution.plain) if failed_groups else b"{}"
    unresolvable, count = b"{}", 0
    if unresolvable_codes:
        # The exact reason vector of the unresolvable nodes is the key: equal key, equal map.
        mask = reasons == unresolvable_codes[0]
        for code in unresolvable_codes[1:]:
            mask |= reasons == code
        key = np.where(mask, reasons, np.int8(0)).tobytes()
        cached = resolution._maps.get(key)
        if cached is None:
            groups = [
                (np.flatnonzero(reasons == c), scoring.REASON_MESSAGES[c])
                for c in unresolvable_codes
            ]
            # Count names, not positions (a name listed twice is one map entry).
            count = len(set(_pick(names, np.flatnonzero(mask))))
            cached = (_encode_map(names, groups, resolution.plain), count)
            if len(resolution._maps) >= 4:
                resolution._maps.clear()
            resolution._maps[key] = cached
        unresolvable, count = cached
    fit = np.flatnonzero(reasons == scoring.FIT)
    items = snapshot.padded_items("name")
    if items is not None:
        passing = _json_array(items[resolution.idx[fit]])  # passing names are all known
    else:
        passing = orjson.dumps(_pick(names, fit))
    body = b"".join(
        (
            b'{"Nodes":null,"NodeNames":',
            passing,
            b',"FailedNodes":',
            failed,
            b',"FailedAndUnresolvableNodes":',
            unresolvable,
            b',"Error":""}',
        )
    )
    return body, count


def prioritize_result(
    args: Args, snapshot: NodeSnapshot, weights: scoring.Weights
) -> list[dict[str, Any]]:
    """The HostPriorityList: every candidate with a score in 0..10 (0 for nodes that fail)."""
    scores = prioritize_scores(args, snapshot, weights)
    return [{"Host": name, "Score": score} for name, score in zip(args.names, scores, strict=True)]


def prioritize_scores(args: Args, snapshot: NodeSnapshot, weights: scoring.Weights) -> list[int]:
    """The score (0..10) of every candidate in order; 0 for nodes that fail the filter.

    The numpy reference (`scoring.filter_matrix`/`score_matrix`); `prioritize_body`
    computes the same scores with the compiled kernel.
    """
    return _score_candidates(args, snapshot, weights, compiled=False).tolist()


def _score_candidates(
    args: Args,
    snapshot: NodeSnapshot,
    weights: scoring.Weights,
    resolution: Resolution | None = None,
    compiled: bool = True,
) -> np.ndarray:
    if args.cache_mode:
        resolution = resolution or _resolution(args, snapshot)
        rows, usable = resolution.priced_rows(snapshot), resolution.usable
    else:
        rows, usable, _ = candidate_rows(args, snapshot)
        rows = fail_safe_prices(rows, snapshot)  # a fresh array per call
    if compiled:
        from scheduler import scoring_kernel

        reasons = scoring_kernel.filter_rows(rows, args.pod, usable, scoring.REASON_ZERO_CAPACITY)
        return scoring_kernel.score_rows(rows, args.pod, weights, reasons)
    reasons = scoring.filter_matrix(rows, args.pod)
    if not usable.all():
        reasons = np.where(usable, reasons, scoring.REASON_ZERO_CAPACITY).astype(np.int8)
    return scoring.score_matrix(rows, args.pod, weights, reasons)


_HOST_SCORE = '{{"Host":"{}","Score":{}}}'.format
_SCORE_SUFFIX = np.array(
    [f"{s}}},".encode() for s in range(scoring.MAX_EXTENDER_PRIORITY + 1)], dtype=np.bytes_
)
# The same, left-padded with spaces to one width: ' 7},', '10},'.
_SCORE_ITEM = np.array([s.rjust(_SCORE_SUFFIX.itemsize) for s in _SCORE_SUFFIX.tolist()])


def prioritize_body(args: Args, snapshot: NodeSnapshot, weights: scoring.Weights) -> bytes:
    """`prioritize_result` as JSON bytes, without a dict per node.

    Cache mode with every name known: the snapshot's pre-encoded host entries and
    the score suffixes are gathered as fixed-width bytes, padded with spaces (JSON
    whitespace) or, for very uneven names, with NULs dropped in one pass (JSON text
    from orjson never holds a raw NUL).
    """
    names = args.names
    if not names:
        return b"[]"
    resolution = _resolution(args, snapshot) if args.cache_mode else None
    score_array = _score_candidates(args, snapshot, weights, resolution)
    if resolution is not None and len(snapshot.names):
        padded = snapshot.padded_items("host")
        if resolution.all_known and padded is not None:
            out = np.empty(len(names), dtype=[("host", padded.dtype), ("score", _SCORE_ITEM.dtype)])
            out["host"] = padded[resolution.idx]
            out["score"] = _SCORE_ITEM[score_array]
            return _json_array(out)
        if resolution.all_known:
            entries = snapshot.host_entries()
            out = np.empty(
                len(names), dtype=[("host", entries.dtype), ("score", _SCORE_SUFFIX.dtype)]
            )
            out["host"] = entries[resolution.idx]
            out["score"] = _SCORE_SUFFIX[score_array]
            return b"[" + out.tobytes().replace(b"\x00", b"")[:-1] + b"]"
    scores = score_array.tolist()
    if not _names_are_plain(names):
        pairs = [{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)]
        return orjson.dumps(pairs)
    return f"[{','.join(map(_HOST_SCORE, names, scores))}]".encode()


def error_filter_result(message: str) -> dict[str, Any]:
    """An ExtenderFilterResult carrying only an Error (kube-scheduler fails the pod's cycle)."""
    return {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": message,
    }
