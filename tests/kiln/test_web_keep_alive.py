"""The web as `make dev` and the load test run it keeps an idle keep-alive connection open
longer than a person pauses between clicks. Uvicorn's default (5 s) closed it while a load-test
engineer read an answer, and the engineer's next request raced the close: a wire failure
counted as a server error outside any fault."""

from __future__ import annotations

import http.client
import time

import pytest

from tests.audit.conftest import subprocess_env
from tests.kiln.standalone_process import free_port
from tests.support.shape import WEB_KEEP_ALIVE_SECONDS, Shape

PAUSE_SECONDS = 6  # past uvicorn's default keep-alive timeout of 5 s


@pytest.mark.django_db(transaction=True)
def test_an_idle_connection_outlives_a_pause_between_requests(settings, tmp_path):
    assert WEB_KEEP_ALIVE_SECONDS > PAUSE_SECONDS
    shape = Shape(
        port=free_port(), environment=subprocess_env(settings), workdir=tmp_path, names=("web",),
        web_processes=1,
    )  # fmt: skip
    try:
        shape.start_all(timeout=90)
        wire = http.client.HTTPConnection("127.0.0.1", shape.port, timeout=10)
        wire.request("GET", "/healthz")
        first = wire.getresponse()
        first.read()
        assert first.status == 200 and first.getheader("connection", "").lower() != "close"
        time.sleep(PAUSE_SECONDS)
        # http.client never reconnects by itself: a connection the server closed fails here.
        wire.request("GET", "/healthz")
        again = wire.getresponse()
        again.read()
        assert again.status == 200
        wire.close()
    finally:
        shape.stop_all()
