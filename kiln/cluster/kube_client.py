"""The kubernetes backend's client: configuration, HTTP through the official `kubernetes`
client, error mapping and API discovery, beneath the backend's methods (`kiln.cluster.kubernetes`).

Resources are found by API discovery (`/api/v1`, `/apis/<group>/<version>`), as kubectl
does, so any kind the cluster serves works (CRDs included). A 409 is a `Conflict`; other
refusals are `DeliveryError`s, retryable where the status says the server may recover.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Self

import yaml
from django.conf import settings
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from kiln.cluster.base import USER_AGENT, Conflict, DeliveryError
from kiln.cluster.ratelimit import RateLimit

RETRYABLE = {408, 409, 429, 500, 502, 503, 504}
MERGE_PATCH = "application/merge-patch+json"

# One client per process and configuration, as client-go keeps one client: the token bucket
# and the connection pool are the process's. Built per call (as get_backend is called), each
# would start with a full burst and connections of its own, and KILN_KUBE_QPS would limit
# nothing. The pid is in the key: a forked child (a prefork worker) builds its own.
_PER_PROCESS: dict[tuple, Any] = {}
_PER_PROCESS_LOCK = threading.Lock()


def configuration_from_kubeconfig(text: str, *, where: str) -> k8s.Configuration:
    """A client configuration from a kubeconfig's text; a DeliveryError naming `where` if it
    does not load."""
    try:
        kubeconfig = yaml.safe_load(text)
        configuration = k8s.Configuration()
        k8s_config.load_kube_config_from_dict(
            kubeconfig, client_configuration=configuration, persist_config=False
        )
    except (yaml.YAMLError, k8s_config.ConfigException, TypeError, AttributeError) as exc:
        raise DeliveryError(
            f"the admin kubeconfig of {where} does not load: {exc}", retryable=False
        ) from exc
    return configuration


class KubeClient:
    """Requests to one API server: rate limited, errors mapped, resources discovered."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        timeout: float = 30.0,
        rate_limit: RateLimit | None = None,
    ) -> None:
        self.api = api_client
        self.api.user_agent = USER_AGENT
        # Which process of Kiln's is asking (the promote bench counts each one's requests
        # against its token bucket); API servers ignore a header they do not know.
        self.api.set_default_header("Kiln-Process", str(os.getpid()))
        self.timeout = timeout
        self.rate_limit = rate_limit or RateLimit(0, 1)
        self._discovery: dict[str, dict[str, tuple[str, bool]]] = {}

    @classmethod
    def from_settings(cls) -> Self:
        """The process's client for the current settings (see `_PER_PROCESS`)."""
        key = (
            os.getpid(), getattr(settings, "KILN_KUBE_API_URL", None),
            getattr(settings, "KILN_KUBE_TOKEN_FILE", None),
            getattr(settings, "KILN_KUBE_CA_FILE", None), os.environ.get("KUBECONFIG"),
            settings.KILN_KUBE_QPS, settings.KILN_KUBE_BURST, settings.KILN_KUBE_POOL_SIZE,
        )  # fmt: skip
        with _PER_PROCESS_LOCK:
            if key not in _PER_PROCESS:
                _PER_PROCESS.clear()  # settings changed (tests) or a forked child: start over
                _PER_PROCESS[key] = cls._configured()
            return _PER_PROCESS[key]

    @classmethod
    def _configured(cls) -> Self:
        """KILN_KUBE_API_URL (+ token and CA files) if set, else in-cluster, else kubeconfig;
        with the client limits KILN_KUBE_QPS, KILN_KUBE_BURST and KILN_KUBE_POOL_SIZE."""
        limit = RateLimit(settings.KILN_KUBE_QPS, settings.KILN_KUBE_BURST)
        url = getattr(settings, "KILN_KUBE_API_URL", None)
        if url:
            configuration = k8s.Configuration(host=url)
            configuration.connection_pool_maxsize = settings.KILN_KUBE_POOL_SIZE
            token_file = getattr(settings, "KILN_KUBE_TOKEN_FILE", None)
            if token_file:
                with open(token_file) as fh:
                    configuration.api_key = {"BearerToken": fh.read().strip()}
                    configuration.api_key_prefix = {"BearerToken": "Bearer"}
            ca_file = getattr(settings, "KILN_KUBE_CA_FILE", None)
            if ca_file:
                configuration.ssl_ca_cert = ca_file
            return cls(k8s.ApiClient(configuration), rate_limit=limit)
        try:
            k8s_config.load_incluster_config()
        except k8s_config.ConfigException:
            # The client reads KUBECONFIG once, at import; pass it now so the current value counts.
            k8s_config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
        configuration = k8s.Configuration.get_default_copy()
        configuration.connection_pool_maxsize = settings.KILN_KUBE_POOL_SIZE
        return cls(k8s.ApiClient(configuration), rate_limit=limit)

    # --- HTTP ---------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        stream: bool = False,
        timeout: float | None = None,
    ):
        self.rate_limit.wait()
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            method, url, headers, body, post = self.api.param_serialize(
                method,
                path,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(
                method,
                url,
                header_params=headers,
                body=body,
                post_params=post,
                _request_timeout=timeout or self.timeout,
            )
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(f"{method} {path}: {exc.reason}") from exc
            raise DeliveryError(
                f"{method} {path}: {exc.status} {exc.reason}", retryable=exc.status in RETRYABLE
            ) from exc
        except Exception as exc:  # noqa: BLE001 - connection errors: the API server may come back
            raise DeliveryError(f"{method} {path}: {exc}", retryable=True) from exc
        if stream:
            return response
        response.read()
        return response

    def _json(self, response) -> Any:
        return json.loads(response.data or b"{}")

    def _check(self, response, what: str, allow: tuple[int, ...] = ()) -> None:
        if response.status >= 400 and response.status not in allow:
            try:
                message = self._json(response).get("message", "")
            except ValueError:
                message = ""
            if response.status == 409:
                raise Conflict(f"{what}: HTTP 409 {message}".strip())
            raise DeliveryError(
                f"{what}: HTTP {response.status} {message}".strip(),
                retryable=response.status in RETRYABLE,
                extra={"status": response.status},
            )

    def _write(
        self, method: str, path: str, body: Any, what: str, content_type: str = MERGE_PATCH
    ) -> Any | None:
        """Send one write; None if the object is not there (404), else the checked response."""
        response = self._request(method, path, body=body, content_type=content_type)
        if response.status == 404:
            return None
        self._check(response, what)
        return response

    # --- discovery ----------------------------------------------------------------

    def _resource(self, api_version: str, kind: str, refreshed: bool = False) -> tuple[str, bool]:
        """(plural, namespaced) of a kind, from the API server's discovery document (cached for
        the backend's life, read again once for a kind it does not list)."""
        if api_version not in self._discovery:
            refreshed = True
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            response = self._request("GET", path)
            if response.status == 404:
                raise DeliveryError(f"the API server does not serve {api_version}", retryable=False)
            self._check(response, f"discovery of {api_version}")
            self._discovery[api_version] = {
                r["kind"]: (r["name"], bool(r.get("namespaced")))
                for r in self._json(response).get("resources", [])
                if "/" not in r["name"]
            }
        found = self._discovery[api_version].get(kind)
        if found is None and not refreshed:  # a kind installed since (a CRD): discover again
            self._discovery.pop(api_version, None)
            return self._resource(api_version, kind, refreshed=True)
        if found is None:
            raise DeliveryError(
                f"the API server does not serve {kind} in {api_version}", retryable=False
            )
        return found

    def _path(
        self, api_version: str, kind: str, namespace: str | None, name: str | None = None
    ) -> str:
        plural, namespaced = self._resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{plural}"
        return f"{base}/{name}" if name else base
