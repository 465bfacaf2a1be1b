"""The admission plugins that put a namespace's pods on its node pool, as an API server runs them. No Django.

- PodNodeSelector: the namespace annotation `scheduler.alpha.kubernetes.io/node-selector`
  (`key=value,key=value`) is merged into every new pod's `nodeSelector`. The real plugin
  refuses a pod whose own selector conflicts with it; here the namespace's value wins, so a
  pod can never ask its way off its environment's pool.
- PodTolerationRestriction: the namespace annotation
  `scheduler.alpha.kubernetes.io/defaultTolerations` (a JSON list of tolerations) is added to
  every new pod's tolerations, unless the pod already has an equal one.

The simulated cluster applies them to each pod it creates (`simulated.SimulatedBackend.apply`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kiln.cluster.nodes import dicts_in, json_annotation

A_NODE_SELECTOR = "scheduler.alpha.kubernetes.io/node-selector"
A_DEFAULT_TOLERATIONS = "scheduler.alpha.kubernetes.io/defaultTolerations"


def node_selector(annotations: Mapping[str, str]) -> dict[str, str]:
    """The namespace's node selector (`key=value,...`); unreadable terms are left out."""
    out: dict[str, str] = {}
    for term in str(annotations.get(A_NODE_SELECTOR) or "").split(","):
        key, sep, value = term.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def default_tolerations(annotations: Mapping[str, str]) -> list[dict[str, Any]]:
    """The namespace's default tolerations (a JSON list; anything else reads as none)."""
    return dicts_in(json_annotation(annotations, A_DEFAULT_TOLERATIONS))


def admit_pod(pod: dict[str, Any], namespace_annotations: Mapping[str, str]) -> dict[str, Any]:
    """The pod as the two plugins admit it into a namespace with these annotations (a copy when
    anything changes; the pod itself otherwise)."""
    selector = node_selector(namespace_annotations)
    tolerations = default_tolerations(namespace_annotations)
    if not selector and not tolerations:
        return pod
    admitted = copy.deepcopy(pod)
    spec = admitted.setdefault("spec", {})
    if selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **selector}
    if tolerations:
        have = list(spec.get("tolerations") or [])
        spec["tolerations"] = have + [t for t in tolerations if t not in have]
    return admitted
