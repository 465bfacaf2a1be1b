"""Tenant audit evidence without Django: what a tenant API server's audit webhook may post (an
`audit.k8s.io/v1` EventList), how archived events are hashed, and how an archive is verified
against the hashes Kiln's audit chain holds. The services are in portal/services/tenant_audit.py.

Hashing: an event's SHA-256 is over its canonical JSON (sorted keys, no spaces, UTF-8); the
running hash is `sha256(previous_running_hex + event_sha256_hex)`, starting from GENESIS. Each
accepted batch is audited with the running hash after its last event, so removing, altering or
reordering an archived event changes a hash the chain already holds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

GENESIS = "0" * 64
API_VERSION = "audit.k8s.io/v1"
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_ITEMS = 1000
MAX_ID_CHARS = 64
STAGES = frozenset({"RequestReceived", "ResponseStarted", "ResponseComplete", "Panic"})
LEVELS = frozenset({"None", "Metadata", "Request", "RequestResponse"})
REQUIRED_STRINGS = ("auditID", "stage", "level", "verb", "requestURI")
# Namespaces of the cluster's own machinery: their service accounts' requests are the control
# plane at work (leader election, node leases), not the tenant's.
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
SERVICE_ACCOUNT = "system:serviceaccount:"


class TenantAuditInvalid(ValueError):
    """The body is not an audit EventList Kiln accepts; the message says where."""


def canonical(event: Mapping[str, Any]) -> bytes:
    """The bytes an event's hash is over."""
    return json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def event_sha256(event: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical(event)).hexdigest()


def running_sha256(previous: str, event_hash: str) -> str:
    return hashlib.sha256((previous + event_hash).encode()).hexdigest()


def _check_event(position: int, item: Any) -> dict:
    where = f"items[{position}]"
    if not isinstance(item, dict):
        raise TenantAuditInvalid(f"{where}: an audit event must be an object")
    if item.get("apiVersion", API_VERSION) != API_VERSION or item.get("kind", "Event") != "Event":
        raise TenantAuditInvalid(f"{where}: expected kind Event of {API_VERSION}")
    for key in REQUIRED_STRINGS:
        if not isinstance(item.get(key), str) or not item[key]:
            raise TenantAuditInvalid(f"{where}: {key} must be a non-empty string")
    if len(item["auditID"]) > MAX_ID_CHARS:
        raise TenantAuditInvalid(f"{where}: auditID is longer than {MAX_ID_CHARS} characters")
    if item["stage"] not in STAGES:
        raise TenantAuditInvalid(f"{where}: unknown stage {item['stage']!r}")
    if item["level"] not in LEVELS:
        raise TenantAuditInvalid(f"{where}: unknown level {item['level']!r}")
    if not isinstance(item.get("user"), dict):
        raise TenantAuditInvalid(f"{where}: user must be an object")
    ref = item.get("objectRef")
    if ref is not None and not isinstance(ref, dict):
        raise TenantAuditInvalid(f"{where}: objectRef must be an object")
    return item


def _json_object(body: bytes) -> dict:
    """The body as a JSON object, or TenantAuditInvalid saying why it is not one."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise TenantAuditInvalid(f"the body is not JSON: {exc}") from None
    if isinstance(data, dict):
        return data
    raise TenantAuditInvalid("the body must be a JSON object")


def parse_event_list(body: bytes) -> list[dict]:
    """The events of an EventList body, or TenantAuditInvalid naming what is wrong."""
    if len(body) > MAX_BODY_BYTES:
        raise TenantAuditInvalid(f"the body is larger than {MAX_BODY_BYTES} bytes")
    data = _json_object(body)
    if data.get("apiVersion") != API_VERSION or data.get("kind") != "EventList":
        raise TenantAuditInvalid(f"expected kind EventList of {API_VERSION}")
    items = data.get("items")
    if not isinstance(items, list) or not items:
        raise TenantAuditInvalid("items must be a non-empty list")
    if len(items) > MAX_ITEMS:
        raise TenantAuditInvalid(f"at most {MAX_ITEMS} events per batch")
    return [_check_event(i, item) for i, item in enumerate(items)]


class ArchivedEvent(NamedTuple):
    """One row of an environment's archive, as stored."""

    seq: int
    event: Mapping[str, Any]
    event_sha256: str
    running_sha256: str


def verify_archive(
    events: Sequence[ArchivedEvent], anchors: Iterable[Mapping[str, Any]]
) -> list[str]:
    """What is wrong with an archive (an empty list if nothing): every row's hashes recomputed in
    order, and every anchor (an audited batch: `last_seq`, `running_sha256`) matched to its row."""
    problems: list[str] = []
    running, by_seq = GENESIS, {}
    for expected_seq, row in enumerate(events, start=1):
        if row.seq != expected_seq:
            problems.append(f"event {expected_seq} is missing (next stored is {row.seq})")
            break
        if event_sha256(row.event) != row.event_sha256:
            problems.append(f"event {row.seq} was altered: its content does not match its hash")
        running = running_sha256(running, row.event_sha256)
        if running != row.running_sha256:
            problems.append(
                f"event {row.seq}: the running hash does not follow from the ones before"
            )
        by_seq[row.seq] = running
    for anchor in anchors:
        last = int(anchor["last_seq"])
        if last not in by_seq:
            problems.append(
                f"the chain records {last} events but event {last} is not in the archive"
            )
        elif by_seq[last] != anchor["running_sha256"]:
            problems.append(f"the running hash at event {last} differs from the one in the chain")
    return problems


def is_tenant_activity(event: Mapping[str, Any], *, own_user_agent: str) -> bool:
    """True if an audit event is the tenant at work: not Kiln's own request (its user agent is
    `own_user_agent`), not a control-plane component, node or anonymous caller (users named
    `system:...`), and not a service account of the cluster's own namespaces; the tenant's
    people and its workloads' service accounts count."""
    agent = str(event.get("userAgent") or "")
    if agent == own_user_agent or agent.startswith(own_user_agent + "/"):
        return False
    username = str((event.get("user") or {}).get("username") or "")
    if username.startswith(SERVICE_ACCOUNT):
        namespace = username[len(SERVICE_ACCOUNT) :].split(":", 1)[0]
        return namespace not in SYSTEM_NAMESPACES
    return bool(username) and not username.startswith("system:")


def _stamp(event: Mapping[str, Any]) -> datetime | None:
    raw = event.get("stageTimestamp") or event.get("requestReceivedTimestamp")
    try:
        stamp = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else None


def latest_activity(
    events: Iterable[Mapping[str, Any]], *, own_user_agent: str, now: datetime
) -> datetime | None:
    """When the tenant was last at work in `events` (None if never): the latest timestamp of an
    activity event, never later than `now` (a clock ahead of Kiln's cannot postpone idleness);
    an activity event without a readable timestamp counts as `now`."""
    latest = None
    for event in events:
        if not is_tenant_activity(event, own_user_agent=own_user_agent):
            continue
        stamp = min(_stamp(event) or now, now)
        latest = stamp if latest is None or stamp > latest else latest
    return latest


def resource_of(kind: str) -> str:
    """The resource an API server names in `objectRef` for the kinds Kiln deletes through a
    tenant's API server (FlowSchema, PriorityLevelConfiguration): the kind, lower case, plural."""
    return kind.lower() + "s"
