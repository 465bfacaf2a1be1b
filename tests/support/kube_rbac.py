"""Kubernetes RBAC as kube-apiserver evaluates it, for the simulated API server (kube_sim.py).

Pure: no HTTP, no Django. `RBACAuthorizer` is built from RBAC objects (Role, ClusterRole,
RoleBinding, ClusterRoleBinding, ServiceAccount: what `kubectl kustomize deploy/base` renders)
and answers, for one request's attributes, whether any bound rule allows it, as the RBAC
authorizer does (rules only grant; no deny):

- subjects: a ServiceAccount is the user `system:serviceaccount:<ns>:<name>` in the groups
  `system:serviceaccounts`, `system:serviceaccounts:<ns>` and `system:authenticated`; `User`
  and `Group` subjects match by name;
- a RoleBinding grants its role's rules in its own namespace only (a ClusterRole referenced by
  a RoleBinding too); a ClusterRoleBinding grants a ClusterRole everywhere;
- a rule matches on verbs, apiGroups, resources (`<resource>/<subresource>` for a subresource,
  `*` and `*/<subresource>` as written), resourceNames (only when the request names an object;
  a list, watch without a name, or create never matches a rule with resourceNames);
- discovery (`/api`, `/apis/...` without a resource) is allowed for any authenticated user, as
  the default `system:discovery` ClusterRoleBinding does.

Tokens are issued by `issue_token(namespace, name)` for a rendered ServiceAccount, and by
`admin_token()` for a member of `system:masters` (allowed everything, as kube-apiserver lets that
group bypass authorization: a test seeds the cluster with it); a request without a known token
is `system:anonymous` and is allowed nothing.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass

ANONYMOUS = "system:anonymous"
MASTERS = "system:masters"
RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ServiceAccount")
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


@dataclass(frozen=True)
class Identity:
    """An authenticated user and its groups."""

    user: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Attributes:
    """What one request asks, as kube-apiserver's RequestInfo describes it."""

    verb: str
    api_group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    def forbidden_message(self, user: str) -> str:
        """kube-apiserver's wording of a denial of these attributes."""
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        subject = f'{resource} "{self.name}"' if self.name else resource
        scope = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        return (
            f'{subject} is forbidden: User "{user}" cannot {self.verb} resource "{resource}" '
            f'in API group "{self.api_group}" {scope}'
        )


def service_account_identity(namespace: str, name: str) -> Identity:
    """The user and groups a ServiceAccount's token authenticates as."""
    return Identity(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
    )


def _matches(values: Iterable[str], wanted: str) -> bool:
    values = list(values or [])
    return "*" in values or wanted in values


def _resource_matches(resources: Iterable[str], resource: str, subresource: str) -> bool:
    full = f"{resource}/{subresource}" if subresource else resource
    for r in resources or []:
        if r in ("*", full):
            return True
        if subresource and r == f"*/{subresource}":
            return True
    return False


def rule_allows(rule: dict, attrs: Attributes) -> bool:
    """Whether one PolicyRule allows the request (resource requests only)."""
    if not _matches(rule.get("verbs", []), attrs.verb):
        return False
    if not _matches(rule.get("apiGroups", []), attrs.api_group):
        return False
    if not _resource_matches(rule.get("resources", []), attrs.resource, attrs.subresource):
        return False
    names = rule.get("resourceNames") or []
    return not names or (bool(attrs.name) and attrs.name in names)


class RBACAuthorizer:
    """Authenticates bearer tokens to ServiceAccounts and authorizes requests by RBAC objects."""

    def __init__(self, objects: Iterable[dict]) -> None:
        self.roles: dict[tuple[str, str, str], list[dict]] = {}  # (kind, namespace, name)
        self.bindings: list[dict] = []
        self.service_accounts: set[tuple[str, str]] = set()
        self.tokens: dict[str, Identity] = {}
        for obj in objects:
            self.add(obj)

    def add(self, obj: dict) -> None:
        """Take one RBAC object (other kinds are ignored)."""
        kind, meta = obj.get("kind"), obj.get("metadata") or {}
        namespace = meta.get("namespace") or ""
        if kind in ("Role", "ClusterRole"):
            scope = namespace if kind == "Role" else ""
            self.roles[(kind, scope, meta["name"])] = list(obj.get("rules") or [])
        elif kind in ("RoleBinding", "ClusterRoleBinding"):
            self.bindings.append(obj)
        elif kind == "ServiceAccount":
            self.service_accounts.add((namespace, meta["name"]))

    def remove_rule(self, kind: str, name: str, index: int, namespace: str = "") -> dict:
        """Drop one rule of a role (the proof that a rule is needed); returns the rule removed."""
        return self.roles[(kind, namespace if kind == "Role" else "", name)].pop(index)

    def issue_token(self, namespace: str, name: str) -> str:
        """A bearer token for a rendered ServiceAccount."""
        if (namespace, name) not in self.service_accounts:
            raise KeyError(f"no ServiceAccount {namespace}/{name} was rendered")
        token = secrets.token_urlsafe(24)
        self.tokens[token] = service_account_identity(namespace, name)
        return token

    def admin_token(self) -> str:
        """A bearer token for a cluster administrator (group `system:masters`)."""
        token = secrets.token_urlsafe(24)
        self.tokens[token] = Identity("kubernetes-admin", (MASTERS, "system:authenticated"))
        return token

    def authenticate(self, authorization: str | None) -> Identity:
        """The identity of an `Authorization: Bearer <token>` header, else anonymous."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and token.strip() in self.tokens:
            return self.tokens[token.strip()]
        return Identity(ANONYMOUS, ("system:unauthenticated",))

    def _subject_matches(self, subject: dict, who: Identity, binding_namespace: str) -> bool:
        kind, name = subject.get("kind"), subject.get("name")
        if kind == "ServiceAccount":
            namespace = subject.get("namespace") or binding_namespace
            return who.user == f"system:serviceaccount:{namespace}:{name}"
        if kind == "User":
            return who.user == name
        if kind == "Group":
            return name in who.groups
        return False

    def _bound_rules(self, who: Identity, namespace: str) -> Iterable[list[dict]]:
        """The rules of every role bound to `who` that hold in `namespace` ("" is the cluster
        scope: ClusterRoleBindings only; a RoleBinding's rules hold in its own namespace)."""
        for binding in self.bindings:
            meta = binding.get("metadata") or {}
            bound_ns = meta.get("namespace") or ""
            if binding["kind"] == "RoleBinding" and (not namespace or bound_ns != namespace):
                continue
            if not any(
                self._subject_matches(s, who, bound_ns) for s in binding.get("subjects", [])
            ):
                continue
            ref = binding.get("roleRef") or {}
            if ref.get("kind") == "Role":
                if binding["kind"] == "RoleBinding":  # a ClusterRoleBinding cannot name a Role
                    yield self.roles.get(("Role", bound_ns, ref.get("name")), [])
            else:
                yield self.roles.get(("ClusterRole", "", ref.get("name")), [])

    def allows(self, who: Identity, attrs: Attributes) -> bool:
        """Whether any rule bound to `who` (cluster-wide, or in the request's namespace) allows it."""
        if who.user == ANONYMOUS:
            return False
        if MASTERS in who.groups:
            return True
        return any(
            rule_allows(rule, attrs)
            for rules in self._bound_rules(who, attrs.namespace)
            for rule in rules
        )


def rbac_objects(documents: Iterable[dict | None]) -> list[dict]:
    """The RBAC objects (and ServiceAccounts) among rendered documents."""
    return [d for d in documents if d and d.get("kind") in RBAC_KINDS]
