"""kube-scheduler's HTTP extender protocol (`k8s.io/kube-scheduler/extender/v1`): decoding ExtenderArgs.

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

import secrets
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
import orjson

from scheduler import pools, scoring
from scheduler.extender.quantity import ProtocolError, parse_quantity
from scheduler.extender.snapshot import NodeSnapshot, Resolution

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

__all__ = ["ProtocolError", "parse_quantity"]  # re-exported from `quantity` for callers


def go_field(obj: dict[str, Any], key: str) -> Any:
    """The value of a Go struct field by name, matched case-insensitively as Go's decoder does."""
    if key in obj:
        return obj[key]
    lower = key.lower()
    for k, v in obj.items():
        if isinstance(k, str) and k.lower() == lower:
            return v
    return None


def _member(obj: dict[str, Any], key: str, kind: type, message: str) -> Any:
    """obj[key], empty when missing or null; a ProtocolError(message) when it is not a `kind`."""
    value = obj.get(key) or kind()
    if not isinstance(value, kind):
        raise ProtocolError(message)
    return value


def _requests(container: Any) -> tuple[Decimal, Decimal, Decimal]:
    """A container's requests (cores, bytes, GPUs); a missing request defaults to the limit."""
    if not isinstance(container, dict):
        raise ProtocolError("a container is not an object")
    resources = _member(container, "resources", dict, "container resources is not an object")
    requests = _member(resources, "requests", dict, "container requests/limits is not an object")
    limits = _member(resources, "limits", dict, "container requests/limits is not an object")
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
    metadata = _member(pod, "metadata", dict, "Pod metadata/spec is not an object")
    spec = _member(pod, "spec", dict, "Pod metadata/spec is not an object")
    labels = _member(metadata, "labels", dict, "Pod labels is not an object")
    containers = _member(spec, "containers", list, "Pod containers is not a list")
    init = _member(spec, "initContainers", list, "Pod containers is not a list")
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


def node_row(node: dict[str, Any], known: np.ndarray | None) -> np.ndarray:
    """A scoring row from a v1.Node object; requested (and prices) come from the inventory if known."""
    row = (
        known.copy()
        if known is not None
        else np.array([0, 0, 0, 0, 0, 0, np.nan, np.nan, 0], dtype=np.float64)
    )
    metadata, status = node.get("metadata") or {}, node.get("status") or {}
    if not isinstance(metadata, dict) or not isinstance(status, dict):
        raise ProtocolError(REASON_MALFORMED_NODE)
    labels = metadata.get("labels") or {}
    allocatable = status.get("allocatable") or {}
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


def filter_result_of(
    *,
    nodes: dict[str, Any] | None = None,
    node_names: list[str] | None = None,
    failed: dict[str, str] | None = None,
    unresolvable: dict[str, str] | None = None,
    error: str = "",
) -> dict[str, Any]:
    """An ExtenderFilterResult with Go's field names (absent maps are empty, absent lists null)."""
    return {
        "Nodes": nodes,
        "NodeNames": node_names,
        "FailedNodes": failed or {},
        "FailedAndUnresolvableNodes": unresolvable or {},
        "Error": error,
    }


def error_filter_result(message: str) -> dict[str, Any]:
    """An ExtenderFilterResult carrying only an Error (kube-scheduler fails the pod's cycle)."""
    return filter_result_of(error=message)


@dataclass
class Args:
    """A parsed ExtenderArgs: the pod, which mode, candidate names and (non-cache mode) node objects.

    `resolution` is set when `parse_args` already resolved the names against
    `resolved_against` (the snapshot it was given); other snapshots resolve anew.
    `decoded` is None when the names were never decoded (every one was found in the
    inventory from the array's bytes): `names` then reads them from the resolution.
    """

    pod: scoring.PodRequest
    cache_mode: bool
    decoded: list[str] | None
    node_objects: list[dict[str, Any]] | None
    resolution: Resolution | None = field(default=None, repr=False, compare=False)
    resolved_against: NodeSnapshot | None = field(default=None, repr=False, compare=False)
    # The pod's namespace, workload and DaemonSet flag, for the pool rules (`pools.apply`).
    placement: pools.PodPlacement = field(default_factory=pools.PodPlacement)

    @property
    def names(self) -> list[str]:
        """The candidate names, in order (taken from the resolution when not decoded)."""
        if self.decoded is None:  # parse_args sets one of the two
            self.decoded = self.resolution.names
        return self.decoded

    @property
    def count(self) -> int:
        """How many candidate names there are, without building their list."""
        return self.resolution.count if self.decoded is None else len(self.decoded)

    def resolved(self, snapshot: NodeSnapshot) -> Resolution:
        """The candidate names resolved against `snapshot` (reusing what parse_args resolved)."""
        if self.resolution is not None and self.resolved_against is snapshot:
            return self.resolution
        return snapshot.resolve(self.names)


def _decode(body: bytes | str) -> dict[str, Any]:
    """The body as a JSON object, or a ProtocolError saying why not."""
    try:
        data = orjson.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ProtocolError("ExtenderArgs must be a JSON object")
    return data


def _names_list(names: Any) -> list[str]:
    """NodeNames, checked to be a list of strings."""
    if not isinstance(names, list):
        raise ProtocolError("NodeNames must be a list of strings")
    # str.join runs in C and refuses anything but strings: on the hot path for 10k+ names.
    try:
        "".join(names)
    except TypeError:
        raise ProtocolError("NodeNames must be a list of strings") from None
    return names


def _args_from(
    data: dict[str, Any], names: list[str] | None = None, *, split: bool = False
) -> Args:
    """Validate decoded ExtenderArgs; with `split`, NodeNames is a placeholder for an array the
    caller checked: `names`, or (None) names it attaches as a resolution."""
    pod_object = go_field(data, "Pod")
    pod = pod_request(pod_object)
    placement = pools.pod_placement(pod_object)
    nodes = go_field(data, "Nodes")
    if nodes is not None:
        if not isinstance(nodes, dict) or not isinstance(nodes.get("items", []), list):
            raise ProtocolError("Nodes must be a NodeList object with an items list")
        items = nodes.get("items") or []
        node_names = []
        for item in items:
            metadata = item.get("metadata") if isinstance(item, dict) else None
            name = metadata.get("name") if isinstance(metadata, dict) else None
            if not isinstance(name, str) or not name:
                raise ProtocolError("every node in Nodes.items needs metadata.name")
            node_names.append(name)
        return Args(pod, False, node_names, items, placement=placement)
    if not split:
        names = go_field(data, "NodeNames")
        if names is None:
            raise ProtocolError(
                "ExtenderArgs needs Nodes (nodeCacheCapable: false) or NodeNames (true)"
            )
        names = _names_list(names)
    return Args(pod, True, names, None, placement=placement)


# Lists shorter than this are cheap to decode and their bytes are not worth remembering.
RAW_NAMES_MIN = 256
# Stands in for the NodeNames array so the rest of a body decodes alone;
# the per-process nonce means no body can carry it by chance.
_NAMES_PLACEHOLDER_TEXT = "kiln-cached-node-names-" + secrets.token_hex(16)
_NAMES_PLACEHOLDER = orjson.dumps(_NAMES_PLACEHOLDER_TEXT)
_NAMES_KEY = b'"NodeNames"'
_WS = b" \t\r\n"


def parse_args(body: bytes | str, snapshot: NodeSnapshot | None = None) -> Args:
    """Decode and validate an ExtenderArgs body; raise ProtocolError with the reason.

    With a `snapshot`, the names are resolved against it. A body that ends in its
    NodeNames array, as kube-scheduler writes it, is decoded in two parts
    (`_parse_split`): the array's names are found from its bytes (`lookup.positions`)
    and the array is not decoded when the inventory knows every name, nor looked up
    when its bytes equal those of a list this snapshot saw come back (kube-scheduler
    sends the same candidate list for pod after pod). The result is the same as
    decoding the whole body. Kept for the HTTP p99 <= 10 ms targets at 12,477 nodes,
    the same list on each call and a different one (docs/scheduler.md).
    """
    if snapshot is not None and isinstance(body, bytes):
        args = _parse_split(body, snapshot)
        if args is not None:
            return args
    args = _args_from(_decode(body))
    if snapshot is not None and args.cache_mode:
        args.resolution, args.resolved_against = snapshot.resolve(args.names), snapshot
    return args


def _skip_ws(body: bytes, pos: int, step: int) -> int:
    """The first position from `pos` (walking by `step`) that is not JSON whitespace."""
    while 0 <= pos < len(body) and body[pos] in _WS:
        pos += step
    return pos


def _tail_array(body: bytes) -> tuple[int, int] | None:
    """Where a trailing `"NodeNames": [...]` value starts and ends, if the body ends in one.

    Only the shape is found here; `_parse_split` proves it is the top-level value.
    """
    end = _skip_ws(body, len(body) - 1, -1)
    if end <= 0 or body[end] != 0x7D:  # '}'
        return None
    end = _skip_ws(body, end - 1, -1) + 1
    if end <= 0 or body[end - 1] != 0x5D:  # ']'
        return None
    # kube-scheduler's Pod holds no such key, so the first is the one (found from the front,
    # not across the whole array); whichever it is, `_parse_split` checks it.
    key = body.find(_NAMES_KEY, 0, end)
    if key < 0:
        return None
    colon = _skip_ws(body, key + len(_NAMES_KEY), 1)
    if colon >= end or body[colon] != 0x3A:  # ':'
        return None
    start = _skip_ws(body, colon + 1, 1)
    if start >= end or body[start] != 0x5B:  # '['
        return None
    return start, end


def _parse_split(body: bytes, snapshot: NodeSnapshot) -> Args | None:
    """Args from a body ending in its NodeNames array, decoded apart from the rest (or None).

    kube-scheduler (Go) writes ExtenderArgs as Pod, Nodes, NodeNames: the
    candidate array is the last value of the body. The rest is decoded with a
    placeholder in the array's place; only if the placeholder then is the
    top-level NodeNames value is the array taken as the names. Anything else
    returns None (decode the whole body, which also words any error).
    """
    span = _tail_array(body)
    if span is None:
        return None
    start, end = span
    try:
        data = _decode(body[:start] + _NAMES_PLACEHOLDER + body[end:])
    except ProtocolError:
        return None
    if go_field(data, "NodeNames") != _NAMES_PLACEHOLDER_TEXT:
        return None
    known = snapshot.recall(body, start, end)
    if known is not None:
        args = _args_from(data, split=True)
        if args.cache_mode:
            args.resolution, args.resolved_against = known, snapshot
        return args
    raw = body[start:end]
    # numba is loaded here, at the first split request, not by every process that imports the
    # scheduler app (the admin does, through nodesync; docs/operations.md has the cost).
    from scheduler.extender.lookup import positions

    # The rows of the array's names, found from its bytes (None: escapes, or not an array of
    # strings). When the inventory knows every one, the bytes are those names: they are
    # neither decoded nor built into a list (`Args.names` reads them if asked).
    found = positions(snapshot.name_table(), raw)
    names = None
    if found is None or not bool((found >= 0).all()):
        try:
            names = _names_list(orjson.loads(raw))
        except (ValueError, ProtocolError):
            return None
    args = _args_from(data, names, split=True)
    if args.cache_mode:
        resolution = snapshot.resolve(names, raw=raw, idx=found)
        # A list that came back is likely to keep coming: remember its bytes (they
        # decode to exactly its names, just checked); a list seen once costs nothing.
        if resolution.hits and resolution.count >= RAW_NAMES_MIN and not resolution.raw:
            resolution.raw = raw
        args.resolution, args.resolved_against = resolution, snapshot
    return args
