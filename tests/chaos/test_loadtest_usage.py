"""What the load test reports beside Kiln's own processes (bench/loadtest/usage.py) and
how its pacing is given (`loadtest --think`)."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from bench.loadtest import usage
from bench.management.commands.loadtest import _think
from tests.support.serving import serve_in_thread


def test_busy_share_is_the_busy_part_of_every_cores_ticks():
    before = {"machine": (1_000, 4_000)}
    assert usage.busy_share(before, {"machine": (1_150, 4_200)}) == 0.75
    assert usage.busy_share(before, {"machine": (1_000, 4_000)}) == 0.0  # no time passed


def test_a_server_restarted_or_unreadable_between_snapshots_is_left_out():
    before = {"postgres": (10, 5.0), "redis": (20, 1.0)}
    assert usage.servers(before, {"postgres": (10, 7.5), "redis": (20, 1.25)}) == {
        "postgres": 2.5, "redis": 0.25,
    }  # fmt: skip
    # A restart starts the counters again under a new pid: its difference means nothing.
    assert usage.servers(before, {"postgres": (11, 0.5), "redis": None}) == {}


def test_machine_ticks_grow_and_busy_never_exceeds_total():
    busy0, total0 = usage.machine_ticks()
    sum(i * i for i in range(300_000))  # some CPU
    busy1, total1 = usage.machine_ticks()
    assert 0 <= busy0 <= total0 and 0 <= busy1 <= total1
    assert busy1 >= busy0 and total1 >= total0


@pytest.mark.django_db
def test_the_database_and_redis_servers_cpu_are_read_from_this_machine(settings):
    pid, before = usage.postgres_cpu_seconds()
    with connection.cursor() as cursor:  # work in a backend: the server's CPU grows
        cursor.execute("SELECT count(*) FROM generate_series(1, 3000000)")
    again, after = usage.postgres_cpu_seconds()
    assert again == pid and after > before
    redis_pid, seconds = usage.redis_cpu_seconds()
    assert redis_pid > 0 and seconds > 0
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens: left out, not an error
    assert usage.redis_cpu_seconds() is None


@pytest.mark.parametrize(
    ("text", "pair"), [("1:5", (1.0, 5.0)), ("0", (0.0, 0.0)), ("2.5", (2.5, 2.5))]
)
def test_think_is_min_colon_max_or_one_number(text, pair):
    assert _think(text) == pair


@pytest.mark.parametrize("text", ["5:1", "-1", "x", "1:inf", "nan", "1:2:3"])
def test_a_think_that_is_not_a_pause_is_refused_before_anything_starts(text):
    with pytest.raises(CommandError, match="--think"):
        call_command("loadtest", "--think", text, "--json")


@pytest.mark.parametrize("flag", ["--web-processes", "--worker-concurrency"])
@pytest.mark.parametrize("text", ["0", "-2", "two"])
def test_a_process_count_below_one_is_refused_before_anything_starts(flag, text):
    with pytest.raises(CommandError, match=flag):
        call_command("loadtest", flag, text, "--json")


def test_the_webs_gc_pauses_are_read_from_its_metrics_over_http():
    registry = CollectorRegistry()
    pauses = Histogram(
        "kiln_gc_pause_seconds",
        "pauses",
        ["generation"],
        buckets=(0.01, 0.05, 0.1),
        registry=registry,
    )
    for seconds in (0.002, 0.03, 0.07, 0.2):
        pauses.labels("2").observe(seconds)
    pauses.labels("0").observe(0.0001)

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the handler's method name
            body = generate_latest(registry)
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    serve_in_thread(server)
    try:
        seen = usage.web_gc_pauses(f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
    assert seen == {
        "0": {"count": 1, "seconds": 0.0, "over_50ms": 0},
        "2": {"count": 4, "seconds": 0.302, "over_50ms": 2},
    }
