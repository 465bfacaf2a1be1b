"""Policy files: a Kyverno `ValidatingPolicy` set loaded from a directory, which objects each
file selects (`spec.matchConstraints.resourceRules`), and the verdicts evaluating them yields.

Pure (no Django). A policy set's version is the SHA-256 over every file's name and SHA-256; a
file that does not parse, or lacks the fields the gate needs, is kept with its load error so
the gate can deny on it (`portal/policy.py` evaluates the files and re-exports these names).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

POLICY_API_GROUP = "policies.kyverno.io"
POLICY_KIND = "ValidatingPolicy"
ALLOW, DENY, ERROR, TIMEOUT, MISSING = "allow", "deny", "error", "timeout", "missing"


class PolicySetMissing(Exception):
    """No policy set (or an empty one) where one was expected."""


@dataclass(frozen=True)
class PolicyFile:
    """One ValidatingPolicy file: its name, path, content hash and parsed document (None if unparsable)."""

    name: str
    path: str
    sha256: str
    doc: dict[str, Any] | None
    load_error: str = ""


@dataclass(frozen=True)
class PolicySet:
    """The policies of one stage; `version` identifies exactly which file contents were in force."""

    name: str
    files: tuple[PolicyFile, ...]

    @property
    def version(self) -> str:
        digest = hashlib.sha256()
        for f in sorted(self.files, key=lambda f: f.path):
            digest.update(f"{Path(f.path).name}:{f.sha256}\n".encode())
        return digest.hexdigest()


@dataclass(frozen=True)
class Verdict:
    """One policy's outcome on one object."""

    policy: str
    sha256: str
    target: str
    allowed: bool
    outcome: str
    message: str = ""


@dataclass
class Evaluation:
    """The outcome of a policy set over some objects: allowed only if no verdict denies."""

    policy_set: str
    version: str
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return bool(self.verdicts) and all(v.allowed for v in self.verdicts)

    @property
    def denials(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.allowed]

    def summary(self) -> str:
        """One line naming every denial (or saying all allowed)."""
        if self.allowed:
            return f"all {len(self.verdicts)} policy checks allowed"
        return "; ".join(f"{v.policy} on {v.target}: {v.message}" for v in self.denials)


# Parsed files by (path, content hash): a changed file is parsed again, an unchanged one never.
_parsed: dict[tuple[str, str], PolicyFile] = {}


def load_policy_set(directory: Path | str, name: str) -> PolicySet:
    """Read every *.yaml/*.yml in `directory`; raise PolicySetMissing if there is none."""
    path = Path(directory)
    if not path.is_dir():
        raise PolicySetMissing(f"policy set {name!r} not found at {path}")
    files: list[PolicyFile] = []
    for file in sorted(list(path.glob("*.yaml")) + list(path.glob("*.yml"))):
        raw = file.read_bytes()
        sha = hashlib.sha256(raw).hexdigest()
        cached = _parsed.get((str(file), sha))
        if cached is None:
            try:
                doc = yaml.safe_load(raw)
                _check_shape(doc)
                cached = PolicyFile(doc["metadata"]["name"], str(file), sha, doc)
            except Exception as exc:  # noqa: BLE001 - any unreadable file is recorded and denies
                cached = PolicyFile(file.stem, str(file), sha, None, f"cannot load: {exc}")
            _parsed[(str(file), sha)] = cached
        files.append(cached)
    if not files:
        raise PolicySetMissing(f"policy set {name!r} at {path} holds no policy files")
    return PolicySet(name, tuple(files))


def _check_shape(doc: Any) -> None:
    if not isinstance(doc, dict):
        raise ValueError("not a mapping")
    group = str(doc.get("apiVersion", "")).split("/")[0]
    if group != POLICY_API_GROUP or doc.get("kind") != POLICY_KIND:
        raise ValueError(f"not a {POLICY_API_GROUP} {POLICY_KIND}")
    if not doc.get("metadata", {}).get("name"):
        raise ValueError("no metadata.name")
    spec = doc.get("spec") or {}
    if not spec.get("validations"):
        raise ValueError("no spec.validations")
    constraints = spec.get("matchConstraints") or {}
    if not constraints.get("resourceRules"):
        raise ValueError("no spec.matchConstraints.resourceRules")
    unsupported = set(constraints) - {"resourceRules", "matchPolicy"}
    if unsupported:
        raise ValueError(f"unsupported matchConstraints: {sorted(unsupported)}")


def resource_of(kind: str) -> str:
    """The plural resource name Kubernetes uses for a kind (NetworkPolicy -> networkpolicies)."""
    lower = kind.lower()
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    return lower + "s"


def matches(doc: dict[str, Any], obj: dict[str, Any], operation: str = "CREATE") -> bool:
    """True if one of the policy's resourceRules selects `obj` for `operation`."""
    api_version = str(obj.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    resource = resource_of(str(obj.get("kind", "")))
    name = metadata_of(obj).get("name")
    for rule in doc["spec"]["matchConstraints"]["resourceRules"]:
        if not _in(rule.get("apiGroups"), group):
            continue
        if not _in(rule.get("apiVersions"), version):
            continue
        if not _in(rule.get("resources"), resource):
            continue
        if not _in(rule.get("operations"), operation):
            continue
        if rule.get("resourceNames") and name not in rule["resourceNames"]:
            continue
        return True
    return False


def _in(allowed: list[str] | None, value: str) -> bool:
    return bool(allowed) and ("*" in allowed or value in allowed)


def metadata_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The object's metadata, or {} when it is missing or not a mapping (the policies then deny)."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}
