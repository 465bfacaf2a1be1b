"""The simulated cluster's tenant API servers: the audit webhook each one runs, configured as
kube-apiserver is, from the files its TenantControlPlane mounts.

A TenantControlPlane's API server is started with `--audit-webhook-config-file=<path>`. The
path is resolved through the control plane's `additionalVolumeMounts` and `additionalVolumes`
to a key of a ConfigMap or Secret in the host cluster, read when each batch is sent (as
kubelet keeps a mounted file current); the webhook kubeconfig names the sink (`server`) and
its bearer token (`token`, or `tokenFile`, itself a mounted file). A batch goes nowhere while
any of that is missing: a control plane composed without its token, or one whose Secret was
never written, has no audit trail, as a real one would not.

Each apply or delete through the tenant's backend is one batch (`--audit-webhook-mode=batch`
flushing per request); a webhook failure never fails the request it audits. Batches are sent
by the transport (`http_transport` unless the process installs another with
`set_audit_transport`: standalone and the test suite hand them to Kiln's sink in process, the
same service the HTTP view calls).
"""

from __future__ import annotations

import json
import logging
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import yaml

from kiln.cluster.base import USER_AGENT, AppliedRef, secret_text
from kiln.errors import KilnError

TCP = ("kamaji.clastix.io/v1alpha1", "TenantControlPlane")
WEBHOOK_FLAG = "--audit-webhook-config-file="
# Whom a request through the tenant's backend is from: Kiln, with the admin kubeconfig Kamaji
# writes for the control plane.
KILN_USER = {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}

Transport = Callable[[str, str, bytes], None]  # (url, bearer token, EventList body)
logger = logging.getLogger(__name__)


def tenant_cluster(namespace: str, name: str) -> str:
    """The simulated cluster's key for the API server of TenantControlPlane `namespace/name`."""
    return f"{namespace}/{name}"


def http_transport(url: str, token: str, body: bytes) -> None:
    """POST one EventList to the sink with the bearer token, as kube-apiserver's webhook does."""
    request = urllib.request.Request(  # noqa: S310 - the URL is the control plane's own config
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=5.0) as response:  # noqa: S310
        response.read()


_transport: list[Transport] = [http_transport]


def set_audit_transport(transport: Transport) -> None:
    """How this process's simulated tenant API servers send their batches."""
    _transport[0] = transport


def audit_transport() -> Transport:
    """The transport batches are sent with now."""
    return _transport[0]


def audit_event(
    verb: str,
    ref: AppliedRef,
    *,
    user: dict[str, Any],
    user_agent: str,
    code: int = 200,
    at: datetime | None = None,
) -> dict[str, Any]:
    """The `audit.k8s.io/v1` Event an API server writes for one completed request on one object."""
    stamp = (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    group, _, version = ref.api_version.rpartition("/")
    resource = ref.kind.lower() + "s"
    base = f"/apis/{ref.api_version}" if group else f"/api/{version}"
    where = f"/namespaces/{ref.namespace}" if ref.namespace else ""
    object_ref = {"apiGroup": group, "apiVersion": version, "resource": resource, "name": ref.name}
    if ref.namespace:
        object_ref["namespace"] = ref.namespace
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Event",
        "auditID": str(uuid.uuid4()),
        "stage": "ResponseComplete",
        "level": "Metadata",
        "verb": verb,
        "requestURI": f"{base}{where}/{resource}/{ref.name}",
        "user": user,
        "userAgent": user_agent,
        "objectRef": object_ref,
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": stamp,
        "stageTimestamp": stamp,
    }


class TenantAuditWebhook:
    """The audit webhook of the simulated API server of TenantControlPlane `namespace/name`.

    `host` is the host cluster's backend (where the control plane and the files it mounts are);
    `user` and `user_agent` say who the requests through this tenant backend are from.
    """

    def __init__(
        self,
        host: Any,
        namespace: str,
        name: str,
        *,
        user: dict[str, Any] | None = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.host, self.namespace, self.name = host, namespace, name
        self.user, self.user_agent = user or KILN_USER, user_agent
        self.dropped: list[str] = []

    def _mounted(self, deployment: dict[str, Any], path: str) -> str | None:
        """The text of the file at `path` in the API server's container, or None."""
        mounts = (deployment.get("additionalVolumeMounts") or {}).get("apiServer") or []
        volumes = {v.get("name"): v for v in deployment.get("additionalVolumes") or []}
        for mount in mounts:
            root = str(mount.get("mountPath", "")).rstrip("/") + "/"
            if not path.startswith(root):
                continue
            key, volume = path[len(root) :], volumes.get(mount.get("name")) or {}
            if "configMap" in volume:
                config_map = self.host.get(
                    "v1", "ConfigMap", self.namespace, volume["configMap"].get("name", "")
                )
                return ((config_map or {}).get("data") or {}).get(key)
            if "secret" in volume:
                secret = self.host.get(
                    "v1", "Secret", self.namespace, volume["secret"].get("secretName", "")
                )
                return secret_text(secret, key)
        return None

    def target(self) -> tuple[str, str] | None:
        """(sink URL, bearer token) from the control plane's webhook config, or None if unset."""
        tcp = self.host.get(*TCP, self.namespace, self.name)
        deployment = (((tcp or {}).get("spec") or {}).get("controlPlane") or {}).get(
            "deployment"
        ) or {}
        args = (deployment.get("extraArgs") or {}).get("apiServer") or []
        path = next((a[len(WEBHOOK_FLAG) :] for a in args if a.startswith(WEBHOOK_FLAG)), None)
        text = self._mounted(deployment, path) if path else None
        try:
            config = yaml.safe_load(text) if text else None
        except yaml.YAMLError:
            return None
        if not isinstance(config, dict):
            return None
        contexts = {c.get("name"): c.get("context") or {} for c in config.get("contexts") or []}
        context = contexts.get(config.get("current-context")) or {}
        clusters = {c.get("name"): c.get("cluster") or {} for c in config.get("clusters") or []}
        users = {u.get("name"): u.get("user") or {} for u in config.get("users") or []}
        server = (clusters.get(context.get("cluster")) or {}).get("server")
        user = users.get(context.get("user")) or {}
        token = user.get("token") or (
            self._mounted(deployment, user["tokenFile"]) if user.get("tokenFile") else None
        )
        if not server or not token:
            return None
        return str(server), token.strip()

    def record(self, verb: str, refs: list[tuple[AppliedRef, int]]) -> None:
        """Send one batch: an event per (object, response code) of a completed request."""
        if not refs:
            return
        target = self.target()
        if target is None:
            self.dropped.append("no audit webhook is configured with a sink and a token")
            return
        items = [
            audit_event(verb, ref, user=self.user, user_agent=self.user_agent, code=code)
            for ref, code in refs
        ]
        body = json.dumps({"apiVersion": "audit.k8s.io/v1", "kind": "EventList", "items": items})
        try:
            audit_transport()(target[0], target[1], body.encode())
        except (OSError, KilnError) as exc:
            # Teardown's wait for the acknowledgement of its deletions is what notices.
            self.dropped.append(str(exc))
            logger.warning(
                "tenant audit batch of %s/%s dropped: %s", self.namespace, self.name, exc
            )


def sleeping_front(
    host: Any,
    namespace: str,
    name: str,
    *,
    verb: str,
    ref: AppliedRef,
    user: dict[str, Any],
    user_agent: str,
) -> int:
    """A request to the API server of a sleeping TenantControlPlane (zero replicas) on the
    simulated cluster: nothing serves it, so it is answered 503, and the control plane's front
    door audits it to the sink as the tenant's own request (what lets Kiln wake the tenant on
    use). A real Kamaji control plane asleep has no such door: there the request just fails."""
    TenantAuditWebhook(host, namespace, name, user=user, user_agent=user_agent).record(
        verb, [(ref, 503)]
    )
    return 503
