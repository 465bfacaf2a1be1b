"""A traffic source that serves Istio's standard metrics for each version of a service.

What an Istio sidecar's `/stats/prometheus` shows a scraper, reduced to what Kiln reads:

    istio_requests_total{reporter="destination",response_code="200",
        destination_service="<name>.<namespace>.svc.cluster.local",
        destination_service_name, destination_service_namespace,
        destination_workload="<name>-<version>", destination_version, ...}
    istio_request_duration_milliseconds_bucket{..., le="..."} / _sum / _count

with Istio's default buckets (ISTIO_BUCKETS_MS). Counters are cumulative per version,
as a pod's are: `reset` restarts them at zero (a restarted pod), `remove` drops a
version's series (a deleted pod: Prometheus marks them stale), `down` makes the
target answer 503 (a failed scrape). With `native` the histogram also carries a
native (exponential) histogram of that schema, served in the protobuf exposition
Prometheus asks for when its native-histograms feature is on (the text format has
no way to carry one).

`history` renders snapshots with timestamps as OpenMetrics text for
`PrometheusServer.backfill` (classic histograms only: OpenMetrics text cannot carry
native ones). `drive_tick` feeds one tick of the benchmark's simulated traffic
classes (canary.simulated_traffic) into a source.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from bench.canary import protobuf_exposition as pb
from canary.simulated_traffic import Simulator
from tests.support.serving import serve_in_thread

# Istio's default request duration buckets (ms), as its telemetry filter configures them.
ISTIO_BUCKETS_MS: tuple[float, ...] = (
    0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000,
    30000, 60000, 300000, 600000, 1800000, 3600000,
)  # fmt: skip
NATIVE_SCHEMA = 3  # bucket growth factor 2^(1/8) ~ 1.09, the Go client's default for factor 1.1
PROTOBUF_TYPE = (
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
)
TEXT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUESTS = "istio_requests_total"
DURATION = "istio_request_duration_milliseconds"


@dataclass
class Arm:
    """The cumulative metrics of one version of one service (one pod's counters)."""

    service: str
    namespace: str
    version: str
    bounds: tuple[float, ...]
    native_schema: int | None
    codes: dict[str, int] = field(default_factory=dict)  # requests per response code
    buckets: np.ndarray = field(default=None)  # type: ignore[assignment] # per bucket, +Inf last
    sum_ms: float = 0.0
    native: dict[int, int] = field(default_factory=dict)  # native bucket index -> count
    zero_count: int = 0

    def __post_init__(self) -> None:
        if self.buckets is None:
            self.buckets = np.zeros(len(self.bounds) + 1, dtype=np.int64)

    @property
    def count(self) -> int:
        """Observations in the histogram."""
        return int(self.buckets.sum())

    def labels(self) -> dict[str, str]:
        """The labels Istio's destination reporter puts on this version's series."""
        return {
            "reporter": "destination",
            "source_workload": "istio-ingressgateway",
            "destination_service": f"{self.service}.{self.namespace}.svc.cluster.local",
            "destination_service_name": self.service,
            "destination_service_namespace": self.namespace,
            "destination_workload": f"{self.service}-{self.version}",
            "destination_workload_namespace": self.namespace,
            "destination_version": self.version,
            "request_protocol": "http",
        }

    def observe(self, latencies_ms: np.ndarray, errors: int, error_code: str = "503") -> None:
        """Count one request per latency, `errors` of them answered `error_code`, the rest 200."""
        latencies = np.asarray(latencies_ms, dtype=float)
        n = int(latencies.size)
        errors = max(0, min(int(errors), n))
        if n - errors:
            self.codes["200"] = self.codes.get("200", 0) + n - errors
        if errors:
            self.codes[error_code] = self.codes.get(error_code, 0) + errors
        # Bucket i holds (bounds[i-1], bounds[i]]: Prometheus's `le` is inclusive.
        index = np.searchsorted(np.asarray(self.bounds), latencies, side="left")
        self.buckets += np.bincount(index, minlength=len(self.bounds) + 1)
        self.sum_ms += float(latencies.sum())
        if self.native_schema is not None and n:
            zero = latencies <= pb.ZERO_THRESHOLD
            self.zero_count += int(zero.sum())
            idx = native_index(latencies[~zero], self.native_schema)
            for i, c in zip(*np.unique(idx, return_counts=True), strict=True):
                self.native[int(i)] = self.native.get(int(i), 0) + int(c)

    def reset(self) -> None:
        """Counters back to zero, as a restarted pod's are."""
        self.codes = dict.fromkeys(self.codes, 0)
        self.buckets = np.zeros_like(self.buckets)
        self.sum_ms = 0.0
        self.native = {}
        self.zero_count = 0


def native_index(values: np.ndarray, schema: int) -> np.ndarray:
    """The native histogram bucket index of each positive value: bucket i is (b^(i-1), b^i], b = 2^(2^-schema)."""
    values = np.asarray(values, dtype=float)
    if not values.size:
        return np.zeros(0, dtype=np.int64)
    frac, exp = np.frexp(values)  # value = frac * 2^exp, frac in [0.5, 1)
    # Prometheus's own (exact) rule: ceil(log2(v) * 2^schema), with exact powers of two exact.
    idx = np.ceil((np.log2(frac) + exp) * 2.0**schema).astype(np.int64)
    power = frac == 0.5
    idx[power] = ((exp[power] - 1) * 2**schema).astype(np.int64)
    return idx


def native_bound(index: int, schema: int) -> float:
    """The upper bound of native bucket `index` at `schema`."""
    return float(2.0 ** (index * 2.0**-schema))


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if value != int(value) else str(int(value))


def _label_text(labels: dict[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}"


class IstioSource:
    """An HTTP target on 127.0.0.1 serving the Istio metrics of every arm it holds at /metrics."""

    def __init__(
        self, *, bounds: Sequence[float] = ISTIO_BUCKETS_MS, native_schema: int | None = None
    ) -> None:
        """`native_schema`: also keep a native histogram of that schema (None: classic only)."""
        self.bounds = tuple(float(b) for b in bounds)
        self.native_schema = native_schema
        self.arms: dict[tuple[str, str, str], Arm] = {}
        self.down = False
        self.scrapes = 0
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- traffic ---------------------------------------------------------------------------

    def arm(self, service: str, namespace: str, version: str) -> Arm:
        """The arm of one version (created empty on first use)."""
        key = (service, namespace, version)
        with self.lock:
            if key not in self.arms:
                self.arms[key] = Arm(service, namespace, version, self.bounds, self.native_schema)
            return self.arms[key]

    def observe(
        self,
        service: str,
        namespace: str,
        version: str,
        latencies_ms: Iterable[float],
        errors: int = 0,
        error_code: str = "503",
    ) -> None:
        """Serve one request per latency to `version`, `errors` of them failing with `error_code`."""
        arm = self.arm(service, namespace, version)
        with self.lock:
            arm.observe(np.asarray(list(latencies_ms), dtype=float), errors, error_code)

    def reset(self, service: str, namespace: str, version: str) -> None:
        """Restart a version's pod: its counters start again from zero."""
        arm = self.arm(service, namespace, version)
        with self.lock:
            arm.reset()

    def remove(self, service: str, namespace: str, version: str) -> None:
        """Delete a version's pod: its series vanish from the exposition."""
        with self.lock:
            self.arms.pop((service, namespace, version), None)

    def snapshot(self) -> list[Arm]:
        """A copy of every arm, consistent at one instant."""
        with self.lock:
            return [copy.deepcopy(a) for a in self.arms.values()]

    # --- exposition ------------------------------------------------------------------------

    def text(self) -> str:
        """The Prometheus text exposition (format 0.0.4) of every arm."""
        arms = self.snapshot()
        lines = [f"# TYPE {REQUESTS} counter"]
        for a in arms:
            for code, n in sorted(a.codes.items()):
                lines.append(f"{REQUESTS}{_label_text({**a.labels(), 'response_code': code})} {n}")
        lines.append(f"# TYPE {DURATION} histogram")
        for a in arms:
            lines += _histogram_lines(a, suffix_ts="")
        return "\n".join(lines) + "\n"

    def protobuf(self) -> bytes:
        """The protobuf exposition (delimited MetricFamily messages), native histograms included."""
        arms = self.snapshot()
        requests = [
            pb.metric(
                {**a.labels(), "response_code": code}, counter=pb.message((1, "double", float(n)))
            )
            for a in arms
            for code, n in sorted(a.codes.items())
        ]
        durations = [pb.metric(a.labels(), histogram=pb.histogram_message(a)) for a in arms]
        out = b""
        for name, kind, metrics in ((REQUESTS, 0, requests), (DURATION, 4, durations)):
            family = pb.message((1, "string", name), (3, "varint", kind))
            family += b"".join(pb.field(4, "bytes", m) for m in metrics)
            out += pb.varint(len(family)) + family
        return out

    # --- HTTP ------------------------------------------------------------------------------

    def start(self, port: int = 0) -> IstioSource:
        """Serve /metrics on loopback `port` (0: a free one) in a daemon thread."""
        source = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] != "/metrics":
                    self._answer(404, "text/plain", b"not found\n")
                    return
                source.scrapes += 1
                if source.down:
                    self._answer(503, "text/plain", b"unavailable\n")
                    return
                accept = self.headers.get("Accept", "")
                if source.native_schema is not None and "application/vnd.google.protobuf" in accept:
                    self._answer(200, PROTOBUF_TYPE, source.protobuf())
                else:
                    self._answer(200, TEXT_TYPE, source.text().encode())

            def _answer(self, status: int, ctype: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = serve_in_thread(self._server, start=False)
        self._thread.start()
        return self

    @property
    def address(self) -> str:
        """host:port of the running target."""
        assert self._server is not None, "start() the source first"
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> IstioSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _histogram_lines(a: Arm, suffix_ts: str) -> list[str]:
    labels = a.labels()
    lines = []
    cumulative = np.cumsum(a.buckets)
    for bound, c in zip((*a.bounds, math.inf), cumulative, strict=True):
        lines.append(
            f"{DURATION}_bucket{_label_text({**labels, 'le': _fmt(bound)})} {int(c)}{suffix_ts}"
        )
    lines.append(f"{DURATION}_sum{_label_text(labels)} {_fmt(a.sum_ms)}{suffix_ts}")
    lines.append(f"{DURATION}_count{_label_text(labels)} {a.count}{suffix_ts}")
    return lines


class History:
    """Snapshots of a source at exact times, rendered as OpenMetrics text for backfilling."""

    def __init__(self) -> None:
        """An empty history."""
        self.snapshots: list[tuple[float, list[Arm]]] = []

    def record(self, source: IstioSource, at: float) -> None:
        """What a scrape of `source` at unix time `at` would have stored."""
        if self.snapshots and at <= self.snapshots[-1][0]:
            raise ValueError("snapshots must be recorded in increasing time")
        if not source.down:
            self.snapshots.append((at, source.snapshot()))

    def openmetrics(self) -> str:
        """OpenMetrics text: each family once, its samples in time order, then `# EOF`."""
        lines = ["# TYPE istio_requests counter"]
        for at, arms in self.snapshots:
            ts = f" {at:.3f}"
            for a in arms:
                for code, n in sorted(a.codes.items()):
                    labels = _label_text({**a.labels(), "response_code": code})
                    lines.append(f"{REQUESTS}{labels} {n}{ts}")
        lines.append(f"# TYPE {DURATION} histogram")
        for at, arms in self.snapshots:
            for a in arms:
                lines += _histogram_lines(a, suffix_ts=f" {at:.3f}")
        lines.append("# EOF")
        return "\n".join(lines) + "\n"


def drive_tick(
    source: IstioSource,
    sim: Simulator,
    tick: int,
    weight: float,
    *,
    service: str,
    namespace: str,
    baseline: str,
    canary: str,
    row: int = 0,
    fraction: float = 1.0,
) -> tuple[int, int, int, int]:
    """Serve `fraction` of simulated tick `tick` at `weight`% canary; returns (req_b, err_b, req_c, err_c).

    The simulator keeps a capped sample of latencies per arm; every request gets a
    latency drawn from that arm's sample (with replacement), so the histogram counts
    every request the counters do.
    """
    data = sim.tick(tick, weight)
    rng = np.random.default_rng([sim.seed, tick, row, 99])
    out = []
    for version, req, err, lat in (
        (baseline, data.req_b, data.err_b, data.lat_b),
        (canary, data.req_c, data.err_c, data.lat_c),
    ):
        n = int(round(float(req[row]) * fraction))
        e = int(round(float(err[row]) * fraction))
        sample = lat[row]
        latencies = rng.choice(sample, n, replace=True) if sample.size and n else np.zeros(0)
        source.observe(service, namespace, version, latencies, min(e, n))
        out += [n, min(e, n)]
    return out[0], out[1], out[2], out[3]
