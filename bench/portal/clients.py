"""The provisioning benchmark's two ways to call the API, with one interface (`BenchApi`).

`HttpApi` (the default with a shared broker) talks HTTP to the web of the production shape
(`tests.support.shape`: uvicorn, one process per core, as `make dev` runs it) with bearer tokens, one
keep-alive connection per client thread, as a person's CLI or browser keeps one.

`InProcessApi` calls the API through Django's test client in the bench's own process (the only
way in standalone mode, which runs no web of its own beside the bench): every client thread then
runs Django in that one process, so the threads share one interpreter lock, which no deployed
web does.
"""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any, Protocol

from rest_framework.test import APIClient

URL = "/api/v1/environments/"


class BenchApi(Protocol):
    def create(self, body: dict[str, Any], key: str) -> tuple[int, dict[str, Any]]:
        """POST an environment request with an Idempotency-Key: (status, the JSON answered)."""
        ...

    def approve(self, env_id: str) -> int:
        """POST the approver's approval of one environment: the status answered."""
        ...


class InProcessApi:
    """The engineer's and the approver's test clients, made once per client thread: a client
    loads the middleware stack when it is made, as a server process does once."""

    def __init__(self, *, engineer: Any, approver: Any) -> None:
        self.engineer, self.approver = engineer, approver
        self.local = threading.local()

    def _clients(self) -> tuple[APIClient, APIClient]:
        if not hasattr(self.local, "clients"):
            client, boss = APIClient(), APIClient()
            client.force_authenticate(user=self.engineer)
            boss.force_authenticate(user=self.approver)
            self.local.clients = (client, boss)
        return self.local.clients

    def create(self, body: dict[str, Any], key: str) -> tuple[int, dict[str, Any]]:
        response = self._clients()[0].post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
        return response.status_code, response.json()

    def approve(self, env_id: str) -> int:
        boss = self._clients()[1]
        return boss.post(f"{URL}{env_id}/approve/", {"reason": "bench"}, format="json").status_code


class HttpApi:
    """HTTP/1.1 to the web on 127.0.0.1:`port` with the engineer's and the approver's bearer
    tokens; each client thread keeps its own connection open across its requests."""

    TIMEOUT_SECONDS = 60.0

    def __init__(self, *, port: int, engineer_token: str, approver_token: str) -> None:
        self.port = port
        self.tokens = {"engineer": engineer_token, "approver": approver_token}
        self.local = threading.local()

    def create(self, body: dict[str, Any], key: str) -> tuple[int, dict[str, Any]]:
        return self._call("engineer", "POST", URL, body, {"Idempotency-Key": key})

    def approve(self, env_id: str) -> int:
        return self._call("approver", "POST", f"{URL}{env_id}/approve/", {"reason": "bench"})[0]

    def reject(self, env_id: str, reason: str) -> int:
        """POST the approver's rejection of one environment: the status answered."""
        return self._call("approver", "POST", f"{URL}{env_id}/reject/", {"reason": reason})[0]

    def _call(
        self,
        who: str,
        method: str,
        path: str,
        body: dict[str, Any],
        extra: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        headers = {
            "Authorization": f"Bearer {self.tokens[who]}",
            "Content-Type": "application/json",
            **(extra or {}),
        }
        payload = json.dumps(body)
        for attempt in (1, 2):
            connection = self._connection()
            try:
                connection.request(method, path, body=payload, headers=headers)
                response = connection.getresponse()
                data = response.read()
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                # The server closed an idle keep-alive connection as this request left: a
                # client opens a new one and sends again (an Idempotency-Key makes a create
                # safe to resend; an approval sent twice is refused the second time).
                self.local.connection = None
                connection.close()
                if attempt == 2:
                    raise
                continue
            return response.status, json.loads(data) if data else {}
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _connection(self) -> http.client.HTTPConnection:
        connection = getattr(self.local, "connection", None)
        if connection is None:
            connection = http.client.HTTPConnection(
                "127.0.0.1", self.port, timeout=self.TIMEOUT_SECONDS
            )
            self.local.connection = connection
        return connection
