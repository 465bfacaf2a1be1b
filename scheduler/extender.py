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


@dataclass
class NodeSnapshot:
    """Kiln's inventory as arrays: names, an index by name, and the (N, 9) scoring matrix."""

    names: list[str]
    matrix: np.ndarray
    index: dict[str, int] = field(default_factory=dict)
    # The highest price in the price book: what an unpriced node is charged (NaN if none).
    max_price: float = float("nan")

    # Per node, the JSON text '{"Host":"<name>","Score":' (built on first prioritize).
    _host_entries: np.ndarray | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {name: i for i, name in enumerate(self.names)}

    def host_entries(self) -> np.ndarray:
        """Fixed-width bytes per node: the opening of its HostPriority object, JSON-escaped."""
        if self._host_entries is None:
            entries = [b'{"Host":' + orjson.dumps(name) + b',"Score":' for name in self.names]
            self._host_entries = np.array(entries or [b""], dtype=np.bytes_)
        return self._host_entries

    @classmethod
    def empty(cls) -> NodeSnapshot:
        """A snapshot with no nodes."""
        return cls([], np.zeros((0, len(scoring.NodeArrays.COLUMNS))))


@dataclass
class Args:
    """A parsed ExtenderArgs: the pod, which mode, candidate names and (non-cache mode) node objects."""

    pod: scoring.PodRequest
    cache_mode: bool
    names: list[str]
    node_objects: list[dict[str, Any]] | None


def parse_args(body: bytes | str) -> Args:
    """Decode and validate an ExtenderArgs body; raise ProtocolError with the reason."""
    try:
        data = orjson.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ProtocolError("ExtenderArgs must be a JSON object")
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
    if names is not None:
        # set(map(type, ...)) runs in C: this check is on the hot path for 10k+ names.
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:
            raise ProtocolError("NodeNames must be a list of strings")
        return Args(pod, True, names, None)
    raise ProtocolError("ExtenderArgs needs Nodes (nodeCacheCapable: false) or NodeNames (true)")


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


def cache_index(args: Args, snapshot: NodeSnapshot) -> np.ndarray:
    """Each candidate name's row in the snapshot (-1 when unknown); one C-level pass."""
    n = len(args.names)
    return np.fromiter(map(snapshot.index.get, args.names, repeat(-1)), dtype=np.int64, count=n)


def candidate_rows(
    args: Args, snapshot: NodeSnapshot, idx: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """Scoring rows for the candidates, which positions are usable, and per-position failure reasons."""
    n = len(args.names)
    failures: dict[int, str] = {}
    if args.cache_mode:
        if idx is None:
            idx = cache_index(args, snapshot)
        usable = idx >= 0
        rows = (
            snapshot.matrix[np.where(usable, idx, 0)]
            if len(snapshot.names)
            else np.zeros((n, len(scoring.NodeArrays.COLUMNS)))
        )
        for pos in np.flatnonzero(~usable).tolist():
            failures[pos] = REASON_UNKNOWN_NODE
        return rows, usable, failures
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


def prioritize_result(
    args: Args, snapshot: NodeSnapshot, weights: scoring.Weights
) -> list[dict[str, Any]]:
    """The HostPriorityList: every candidate with a score in 0..10 (0 for nodes that fail)."""
    scores = prioritize_scores(args, snapshot, weights)
    return [{"Host": name, "Score": score} for name, score in zip(args.names, scores, strict=True)]


def prioritize_scores(args: Args, snapshot: NodeSnapshot, weights: scoring.Weights) -> list[int]:
    """The score (0..10) of every candidate in order; 0 for nodes that fail the filter."""
    return _score_candidates(args, snapshot, weights, None).tolist()


def _score_candidates(
    args: Args, snapshot: NodeSnapshot, weights: scoring.Weights, idx: np.ndarray | None
) -> np.ndarray:
    rows, usable, _ = candidate_rows(args, snapshot, idx)
    rows = fail_safe_prices(rows, snapshot)  # rows are a copy in both modes
    reasons = scoring.filter_matrix(rows, args.pod)
    reasons = np.where(usable, reasons, scoring.REASON_ZERO_CAPACITY).astype(np.int8)
    return scoring.score_matrix(rows, args.pod, weights, reasons)


_HOST_SCORE = '{{"Host":"{}","Score":{}}}'.format
_SCORE_SUFFIX = np.array(
    [f"{s}}},".encode() for s in range(scoring.MAX_EXTENDER_PRIORITY + 1)], dtype=np.bytes_
)


def prioritize_body(args: Args, snapshot: NodeSnapshot, weights: scoring.Weights) -> bytes:
    """`prioritize_result` as JSON bytes, without a dict per node.

    Cache mode with every name known: the snapshot's pre-encoded host entries and
    the score suffixes are gathered as fixed-width bytes, whose NUL padding is then
    dropped in one pass (JSON text from orjson never holds a raw NUL).
    """
    names = args.names
    if not names:
        return b"[]"
    idx = cache_index(args, snapshot) if args.cache_mode else None
    score_array = _score_candidates(args, snapshot, weights, idx)
    if idx is not None and len(snapshot.names) and bool((idx >= 0).all()):
        entries = snapshot.host_entries()
        out = np.empty(len(names), dtype=[("host", entries.dtype), ("score", _SCORE_SUFFIX.dtype)])
        out["host"] = entries[idx]
        out["score"] = _SCORE_SUFFIX[score_array]
        return b"[" + out.tobytes().replace(b"\x00", b"")[:-1] + b"]"
    scores = score_array.tolist()
    # orjson quotes every name; if that added only the quotes and commas, none needed escaping.
    quoted = orjson.dumps(names)
    if len(quoted) != len("".join(names).encode()) + 3 * len(names) + 1:
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
