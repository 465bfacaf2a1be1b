"""Validate manifests against the Kubernetes OpenAPI schema and the upstream CRD schemas."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from django.conf import settings

CORE_GROUPS = {
    "",
    "apps",
    "batch",
    "flowcontrol.apiserver.k8s.io",
    "networking.k8s.io",
    "rbac.authorization.k8s.io",
}
K8S_VERSION = "1.33"


def shared_dir() -> Path:
    return Path(settings.BASE_DIR).parent / "shared"


@cache
def crd_index() -> dict[tuple[str, str, str], dict]:
    """(group, version, kind) -> openAPIV3Schema for every CRD under shared/crds and deploy/crossplane XRDs."""
    index: dict[tuple[str, str, str], dict] = {}
    for path in sorted((shared_dir() / "crds").glob("*/*.yaml")):
        crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe loaders only
        for version in crd["spec"]["versions"]:
            key = (crd["spec"]["group"], version["name"], crd["spec"]["names"]["kind"])
            index[key] = version["schema"]["openAPIV3Schema"]
    for path in sorted((Path(settings.BASE_DIR) / "deploy" / "crossplane").glob("xrd-*.yaml")):
        xrd = yaml.safe_load(path.read_text())
        for version in xrd["spec"]["versions"]:
            schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
            # Crossplane adds these to every claim's spec.
            schema["properties"]["spec"]["properties"].update(
                {
                    "compositionSelector": {
                        "type": "object",
                        "properties": {
                            "matchLabels": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            }
                        },
                    },
                    "writeConnectionSecretToRef": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}},
                        "required": ["name"],
                    },
                }
            )
            schema["properties"]["apiVersion"] = {"type": "string"}
            schema["properties"]["kind"] = {"type": "string"}
            schema["properties"]["metadata"] = {"type": "object"}
            index[(xrd["spec"]["group"], version["name"], xrd["spec"]["claimNames"]["kind"])] = (
                schema
            )
    return index


def _strict(schema: Any) -> Any:
    """CRD structural schema -> JSON Schema that rejects unknown fields (as `kubectl --validate=strict`)."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if "properties" in out:
        out["properties"] = {k: _strict(v) for k, v in schema["properties"].items()}
    return out


@cache
def _strict_schema(group: str, version: str, kind: str) -> dict:
    strict = _strict(crd_index()[(group, version, kind)])
    strict["properties"].pop("metadata", None)
    strict["required"] = [r for r in strict.get("required", []) if r != "metadata"]
    return strict


def validate(manifest: dict) -> None:
    """Raise if `manifest` does not validate (core kinds: kubernetes-validate strict; CRDs: CRD schema)."""
    group, _, version = manifest["apiVersion"].rpartition("/")
    if group in CORE_GROUPS:
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
        return
    schema = crd_index().get((group, version, manifest["kind"]))
    if schema is None:
        raise LookupError(f"no schema for {manifest['apiVersion']} {manifest['kind']}")
    body = {k: v for k, v in manifest.items() if k != "metadata"}
    jsonschema.validate(body, _strict_schema(group, version, manifest["kind"]))
    kubernetes_validate.validate(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": manifest["metadata"]},
        K8S_VERSION,
        strict=True,
    )
