"""Is a reverted fault gone? What an object read back after a revert says (pure: no Django).

A revert deletes or edits objects; only reading them back tells whether the fault is gone:

- a VirtualService a fault was merged into is confirmed once no route of it carries a fault
  owned by the injection's (experiment, term);
- a standalone fault VirtualService once it is absent: Istio serves an object until the API
  server removes it, so one held by a finalizer still injects;
- a Chaos Mesh object once it is absent, or Chaos Mesh says it finished (the condition
  `AllRecovered` true: every pod's fault recovered), whether or not it is still deleting.

An object deleting with no finalizer left is gone (the API server removes it now). Anything
else is residue: the evidence a person reads, what was found and why it does not confirm.
"""

from __future__ import annotations

from typing import Any

from canary.faults import fault_entries, owns

ISTIO_API = "networking.istio.io/v1"
CHAOS_MESH_GROUP = "chaos-mesh.org/"
RECOVERED = "AllRecovered"


def _where(ref: dict[str, Any]) -> str:
    namespace = ref.get("namespace") or ""
    return f"{ref.get('kind')} {namespace + '/' if namespace else ''}{ref.get('name')}"


def _finalizers(obj: dict[str, Any]) -> list[str]:
    return list((obj.get("metadata") or {}).get("finalizers") or [])


def _deleting(obj: dict[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def recovered(obj: dict[str, Any]) -> bool:
    """True when a Chaos Mesh object reports every injected record recovered."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == RECOVERED and str(condition.get("status")) == "True":
            return True
    return False


def _found(obj: dict[str, Any]) -> str:
    if _deleting(obj):
        return f"deleting, held by finalizers {', '.join(_finalizers(obj))}"
    return "still present"


def residue(ref: dict[str, Any], live: dict[str, Any] | None) -> dict[str, Any] | None:
    """What is left of the fault `ref` applied in `live` (the object read back), or None if gone."""
    if live is None or (_deleting(live) and not _finalizers(live)):
        return None
    where = _where(ref)
    owner = _owner(ref)
    if ref.get("merged"):
        if owner is None or not owns(live, owner):
            return None
        return {
            "object": where,
            "found": f"{_found(live)}, its routes still carry the fault of term {owner[1]}",
            "faults": [e for e in fault_entries(live) if _owner(e) == owner],
        }
    if str(ref.get("apiVersion", "")).startswith(CHAOS_MESH_GROUP):
        if recovered(live):
            return None
        conditions = [
            {k: c.get(k) for k in ("type", "status", "reason") if k in c}
            for c in (live.get("status") or {}).get("conditions") or []
        ]
        return {
            "object": where,
            "found": f"{_found(live)}, not reported recovered",
            "conditions": conditions,
        }
    return {"object": where, "found": _found(live)}


def adopted_residue(owner: tuple[str, int], vs: dict[str, Any]) -> dict[str, Any] | None:
    """A fault of `owner` still merged in another VirtualService (a rollout adopted it)."""
    if (_deleting(vs) and not _finalizers(vs)) or not owns(vs, owner):
        return None
    meta = vs.get("metadata") or {}
    return {
        "object": f"VirtualService {meta.get('namespace', '')}/{meta.get('name')}",
        "found": f"{_found(vs)}, its routes still carry the fault of term {owner[1]}",
        "faults": [e for e in fault_entries(vs) if _owner(e) == owner],
    }


def read_error(ref: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    """The evidence of a read-back that failed: nothing confirms the fault gone."""
    return {"object": _where(ref), "found": "could not be read back", "error": _short(exc)}


def revert_error(ref: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    """The evidence of a delete or edit that failed."""
    return {"object": _where(ref), "found": "the revert's write failed", "error": _short(exc)}


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def _owner(ref: dict[str, Any]) -> tuple[str, int] | None:
    experiment, token = ref.get("experiment"), ref.get("token")
    if experiment is None or token is None:
        return None
    try:
        return (str(experiment), int(token))
    except (TypeError, ValueError):
        return None
