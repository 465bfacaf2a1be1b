"""Data: the Crossplane claim for an environment's PostgreSQL database (the XRD and the
Composition are in deploy/crossplane/). No Django."""

from __future__ import annotations

from portal.compose.spec import EnvironmentSpec, namespaced


def database_claim(spec: EnvironmentSpec) -> dict:
    """A Crossplane claim for a PostgreSQL database (XRD and Composition in deploy/crossplane/)."""
    size = {"ephemeral": "small", "dev": "small", "staging": "medium", "prod": "large"}[
        spec.env_class
    ]
    return namespaced(
        spec,
        "database.kiln.dev/v1alpha1",
        "PostgreSQLInstance",
        f"{spec.name}-db",
        spec={
            "parameters": {
                "size": size,
                "storageGB": {"small": 20, "medium": 100, "large": 500}[size],
                "version": "16",
                "highAvailability": spec.env_class == "prod",
            },
            "compositionSelector": {"matchLabels": {"kiln.dev/provider": "aws"}},
            "writeConnectionSecretToRef": {"name": f"{spec.name}-db-connection"},
        },
    )
