"""How to reach a READY environment: the kubectl context, a kubeconfig for its namespace, the
tenant control plane's kubeconfig Secret and the database's connection Secret.

Pure: reads the environment's composed manifests (the names the cluster really has), no Django.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

# Kamaji writes a tenant control plane's admin kubeconfig to `<name>-admin-kubeconfig`, key admin.conf.
KAMAJI_KUBECONFIG_SUFFIX = "-admin-kubeconfig"


@dataclass(frozen=True)
class Connection:
    """What a person needs to use an environment from a terminal."""

    namespace: str
    context: str
    control_plane_secret: str  # "" without a tenant control plane
    database_secret: str  # "" without a database claim


def connection(*, namespace: str, manifests: list[dict[str, Any]]) -> Connection:
    """Names taken from the composed manifests: the TenantControlPlane and the database claim's
    `writeConnectionSecretToRef`."""
    control_plane = database = ""
    for manifest in manifests:
        kind = manifest.get("kind")
        if kind == "TenantControlPlane":
            control_plane = manifest["metadata"]["name"] + KAMAJI_KUBECONFIG_SUFFIX
        ref = (manifest.get("spec") or {}).get("writeConnectionSecretToRef") or {}
        if ref.get("name"):
            database = ref["name"]
    return Connection(namespace, f"kiln-{namespace}", control_plane, database)


def kubeconfig(*, conn: Connection, server: str, issuer: str, username: str) -> str:
    """A kubeconfig whose current context is the environment's namespace on the shared cluster;
    the person signs in with the same identity provider that issues Kiln's tokens (OIDC)."""
    user = f"{username}@kiln"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kiln", "cluster": {"server": server}}],
        "contexts": [
            {
                "name": conn.context,
                "context": {"cluster": "kiln", "namespace": conn.namespace, "user": user},
            }
        ],
        "current-context": conn.context,
        "users": [
            {
                "name": user,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": "kubectl",
                        "args": ["oidc-login", "get-token", f"--oidc-issuer-url={issuer}"],
                        "interactiveMode": "IfAvailable",
                    }
                },
            }
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)
