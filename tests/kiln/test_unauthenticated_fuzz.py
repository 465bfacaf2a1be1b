"""Arbitrary bytes and arbitrary JSON at every endpoint anyone can reach without credentials.

Each test throws bounded, Hypothesis-generated input at one unauthenticated surface and
asserts what the endpoint documents: a 4xx with a reason (or its documented success), never
a 5xx, and no record logged at ERROR or with a traceback (`caplog`). The surfaces:

- the scheduler extender (`/scheduler/filter`, `/scheduler/prioritize`, through Django and
  through the dedicated ASGI app), bodies of any bytes, any JSON, and ExtenderArgs whose
  quantities, labels and names are anything;
- the audit transparency log: the witness intake (`POST /audit/tlog/cosignature`), the
  checkpoint, tiles and proofs, public or for auditors only;
- sign-in (`/accounts/login/`), `/healthz`, `/readyz`, `/metrics`, the API root, schema and
  docs, anonymous pages;
- the API's authentication failures: any `Authorization` header, JWT-shaped or not;
- the tenant audit sink (`/hooks/tenant-audit/<id>/`, a per-environment bearer token);
- websocket handshakes on any path, with any token (see also test_websocket_not_found.py).

Kiln serves no JWKS of its own (it reads one, KILN_JWT_JWKS): forged keys and tokens are
covered by the authentication-failure test. Examples are few and derandomized, so the
module runs in the default suite.
"""

from __future__ import annotations

import base64
import json
import logging
from urllib.parse import quote

import orjson
import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.test import Client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduler.extender.handler import ExtenderASGI
from tests.scheduler.conftest import make_node

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
FEW = settings(FUZZ, max_examples=25)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=25,
)
# Things that look like Kubernetes quantities, and things that almost do.
QUANTITY = st.one_of(
    JSON,
    st.from_regex(
        r"[+-]?[0-9.]{0,30}([eE][+-]?[0-9]{1,9})?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?",
        fullmatch=True,
    ),
    st.sampled_from(["1e1000000", "1e-1000000", "9" * 5000, "NaN", "Infinity", "-1", "\u00b2"]),
)
# Header-safe text: what an HTTP client can put in a header value.
HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=200)
# Text for URL paths, percent-encoded as UTF-8 by `quote`. Held to U+00FF: under WSGI (which
# Django's test client speaks) OpenTelemetry's request_uri() cannot encode a decoded path beyond
# Latin-1; Kiln serves ASGI, where such paths are answered 4xx (test_websocket_not_found.py and
# the ASGI tests send them).
PATH_TEXT = st.text(st.characters(max_codepoint=0xFF), max_size=40)


def dumps(value: object) -> bytes:
    """JSON text of any generated value (Python's json also writes NaN and Infinity)."""
    return json.dumps(value, allow_nan=True).encode()


def no_errors_logged(caplog) -> None:
    """Nothing logged at ERROR or above, and no traceback at any level."""
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [(r.name, r.getMessage()[:200]) for r in bad]
    caplog.clear()


def client() -> Client:
    """An anonymous client whose server errors come back as responses (status 500), not raised."""
    return Client(raise_request_exception=False)


def json_message(response) -> str:
    """The reason in Kiln's error shape (or an ExtenderFilterResult's Error)."""
    body = response.json()
    return body.get("message") or body.get("Error") or ""


# --- the scheduler extender ----------------------------------------------------------------


@pytest.fixture
def nodes(db) -> list[str]:
    """Three nodes in the inventory, so cache-mode names resolve to rows as well as miss."""
    make_node("node-od", "on-demand")
    make_node("node-spot", "spot")
    make_node("node-mystery", None, itype="x9.huge")
    return ["node-od", "node-spot", "node-mystery"]


def _pod(requests: dict, init: dict, overhead: object, labels: object) -> dict:
    return {
        "metadata": {"name": "p", "labels": labels},
        "spec": {
            "containers": [{"resources": {"requests": requests, "limits": requests}}],
            "initContainers": [{"resources": {"requests": init}}],
            "overhead": overhead,
        },
    }


def _node(metadata: object, status: object) -> dict:
    return {"metadata": metadata, "status": status}


RESOURCES = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), QUANTITY)
LABELS = st.one_of(JSON, st.just({"karpenter.sh/capacity-type": "spot"}))
NODE = st.builds(
    _node,
    st.one_of(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["node-od", "node-spot", "node-x"]) | JSON, "labels": LABELS}
        ),
        JSON,
    ),
    st.one_of(st.fixed_dictionaries({"allocatable": st.one_of(RESOURCES, JSON)}), JSON),
)
VALID_POD = _pod({"cpu": "250m", "memory": "1Gi"}, {}, {}, {"kiln.dev/workload-class": "batch"})
POD = st.one_of(
    st.just(VALID_POD),  # often valid, so that the nodes after it are read too
    st.builds(
        _pod,
        RESOURCES,
        RESOURCES,
        st.one_of(RESOURCES, JSON),
        st.one_of(JSON, st.dictionaries(st.text(max_size=30), st.text(max_size=30))),
    ),
    JSON,
)
NAMES = st.one_of(
    st.lists(
        st.sampled_from(["node-od", "node-spot", "node-mystery", "ghost"]) | st.text(max_size=20),
        max_size=8,
    ),
    JSON,
)
EXTENDER_ARGS = st.one_of(
    st.fixed_dictionaries({"Pod": POD, "NodeNames": NAMES}),  # nodeCacheCapable: true
    st.fixed_dictionaries(
        {
            "Pod": POD,
            "Nodes": st.fixed_dictionaries({"items": st.lists(NODE | JSON, max_size=4)}) | JSON,
        }
    ),
)
# Bodies that once answered 500: a node whose metadata or status is not an object.
CRASHED = [
    {"Pod": VALID_POD, "Nodes": {"items": [{"metadata": [1]}]}},
    {"Pod": VALID_POD, "Nodes": {"items": [{"metadata": "node-od"}]}},
    {
        "Pod": VALID_POD,
        "Nodes": {"items": [{"metadata": {"name": "node-od", "labels": 1}, "status": [1]}]},
    },
    {
        "Pod": VALID_POD,
        "Nodes": {
            "items": [
                {"metadata": {"name": "node-od"}, "status": {"allocatable": {"cpu": "1e1000000"}}}
            ]
        },
    },
    {"Pod": _pod({"cpu": "1e1000000"}, {}, {}, {}), "NodeNames": ["node-od"]},
]


def _extender_ok(status: int, payload: bytes, verb: str) -> None:
    assert status in (200, 400, 413), (status, payload[:300])
    body = orjson.loads(payload)
    if status == 400:
        message = body["Error"] if verb == "filter" else body["message"]
        assert message and body["code"] == "malformed"
    elif verb == "filter":
        assert set(body) >= {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes"}
    else:
        assert all(0 <= entry["Score"] <= 10 for entry in body)


def _with_examples(test):
    """`test` with every body of CRASHED as an explicit example, besides the generated ones."""
    for body in CRASHED:
        test = example(body=dumps(body))(test)
    return test


@FUZZ
@given(body=st.one_of(st.binary(max_size=2000), JSON.map(dumps), EXTENDER_ARGS.map(dumps)))
@_with_examples
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_extender_answers_any_body_with_a_200_or_a_4xx(nodes, caplog, verb, body):
    caplog.set_level(logging.WARNING)
    response = client().post(f"/scheduler/{verb}", data=body, content_type="application/json")
    _extender_ok(response.status_code, response.content, verb)
    no_errors_logged(caplog)


def _asgi_call(
    app: ExtenderASGI, method: str, path: str, body: bytes, headers: list
) -> tuple[int, bytes]:
    sent: list[dict] = []
    chunks = [body[: len(body) // 2], body[len(body) // 2 :]]

    async def receive() -> dict:
        chunk = chunks.pop(0) if chunks else b""
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    async_to_sync(app)(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@FEW
@given(
    path=st.sampled_from(["/scheduler/filter", "/scheduler/prioritize", "/healthz"])
    | st.text(max_size=30).map(lambda t: "/" + t),
    method=st.sampled_from(["POST", "GET", "PUT", "DELETE"]),
    body=st.one_of(st.binary(max_size=1000), EXTENDER_ARGS.map(dumps)),
    authorization=st.none() | HEADER_TEXT,
)
def test_the_dedicated_extender_app_answers_anything_without_a_5xx(
    nodes, caplog, path, method, body, authorization
):
    caplog.set_level(logging.WARNING)
    headers = [] if authorization is None else [(b"authorization", authorization.encode("latin-1"))]
    status, payload = _asgi_call(ExtenderASGI(), method, path, body, headers)
    assert status < 500, (status, payload[:300])
    if path.rstrip("/") in ("/scheduler/filter", "/scheduler/prioritize") and method == "POST":
        _extender_ok(status, payload, path.rstrip("/").rsplit("/", 1)[1])
    no_errors_logged(caplog)


# --- the audit transparency log --------------------------------------------------------------

SIZE_LINE = st.one_of(
    st.text(max_size=30),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["\u00b2", "9" * 5000, "0", "007", "18446744073709551616"]),
)
B64 = st.binary(max_size=80).map(lambda b: base64.b64encode(b).decode())
NOTE = st.builds(
    lambda origin, size, root, extra, sigs: (
        f"{origin}\n{size}\n{root}\n{extra}\n"
        + "".join(f"\u2014 {name} {blob}\n" for name, blob in sigs)
    ),
    st.text(max_size=30),
    SIZE_LINE,
    B64 | st.text(max_size=50),
    st.text(max_size=60),
    st.lists(
        st.tuples(
            st.sampled_from(["w1", "kiln.test/audit"]) | st.text(max_size=10),
            B64 | st.text(max_size=20),
        ),
        max_size=3,
    ),
)


@FUZZ
@given(body=st.one_of(st.binary(max_size=3000), NOTE.map(str.encode), JSON.map(dumps)))
def test_the_witness_intake_answers_any_note_with_a_4xx(db, caplog, settings, body):
    settings.KILN_AUDIT_WITNESSES = (
        "w1+c0ffee00+" + base64.b64encode(b"\x04" + b"\x01" * 32).decode()
    )
    caplog.set_level(logging.WARNING)
    response = client().post("/audit/tlog/cosignature", data=body, content_type="text/plain")
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    assert json_message(response)
    no_errors_logged(caplog)


TLOG_PATH = st.one_of(
    st.builds(
        "/audit/tlog/tile/{}/{}".format,
        st.integers(min_value=-5, max_value=2**80),
        PATH_TEXT.map(quote),
    ),
    st.builds("/audit/tlog/tile/entries/{}".format, PATH_TEXT.map(quote)),
    st.builds(
        "/api/v1/audit/proofs/{}?{}={}&{}={}".format,
        st.sampled_from(["inclusion", "consistency"]),
        st.sampled_from(["seq", "from", "x"]),
        st.text(max_size=30).map(quote),
        st.sampled_from(["size", "to", "seq"]),
        st.text(max_size=30).map(quote),
    ),
    st.builds("/api/v1/audit/events/{}/proof".format, st.integers(min_value=0, max_value=2**80)),
    st.just("/audit/tlog/checkpoint"),
    st.just("/audit/tlog/cosignature"),
)


@FUZZ
@given(path=TLOG_PATH, public=st.booleans())
def test_the_log_s_reads_answer_any_path_with_a_documented_status(
    db, caplog, settings, path, public
):
    settings.KILN_AUDIT_TLOG_PUBLIC = public
    caplog.set_level(logging.WARNING)
    response = client().get(path)
    # 200 a tile or proof; 400 a bad index or parameter; 401/403 not public; 404 beyond the tree.
    assert response.status_code in (200, 400, 401, 403, 404), (
        path,
        response.status_code,
        response.content[:300],
    )
    no_errors_logged(caplog)


# --- sign-in, probes, metrics, the API root and schema, anonymous pages -----------------------


@FUZZ
@given(
    username=st.text(max_size=300),
    password=st.text(max_size=300),
    extra=st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=3),
    forwarded=st.none() | HEADER_TEXT,
)
def test_sign_in_answers_any_form_with_the_form_or_a_lock(
    db, caplog, username, password, extra, forwarded
):
    caplog.set_level(logging.WARNING)
    headers = {} if forwarded is None else {"HTTP_X_FORWARDED_FOR": forwarded}
    response = client().post(
        "/accounts/login/", {**extra, "username": username, "password": password}, **headers
    )
    # 200: the form again with its errors; 400: a field Django refuses (NUL); 429: locked out.
    assert response.status_code in (200, 400, 429), (response.status_code, response.content[:300])
    no_errors_logged(caplog)


@FUZZ
@given(
    body=st.binary(max_size=2000),
    content_type=st.sampled_from(
        [
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/json",
            "text/plain",
        ]
    ),
)
def test_sign_in_answers_any_bytes_with_a_4xx_or_the_form(db, caplog, body, content_type):
    caplog.set_level(logging.WARNING)
    response = client().post("/accounts/login/", data=body, content_type=content_type)
    assert response.status_code in (200, 400, 429), (response.status_code, response.content[:300])
    no_errors_logged(caplog)


PUBLIC_GETS = {
    "/healthz": (200,),
    "/readyz": (200,),
    "/metrics": (200,),
    "/api/v1/": (200,),
    "/accounts/login/": (200,),
    "/": (302,),
    "/environments/": (302,),
    "/scheduler/": (302,),
    "/audit/": (302,),
    "/audit/public-key/": (200, 302),
    "/nowhere/": (404,),
}


@FEW
@given(
    path=st.sampled_from(sorted(PUBLIC_GETS)),
    query=st.dictionaries(st.text(max_size=10), st.text(max_size=40), max_size=3),
    method=st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"]),
)
def test_public_paths_answer_any_query_and_method_without_a_5xx(db, caplog, path, query, method):
    caplog.set_level(logging.WARNING)
    response = client().generic(
        method, path + "?" + "&".join(f"{quote(k)}={quote(v)}" for k, v in query.items())
    )
    if method == "GET":
        allowed = PUBLIC_GETS[path] + (400,)
    else:  # what each method documents there, or refused: 405, or 401/403 without credentials
        allowed = PUBLIC_GETS[path] + (200, 302, 400, 401, 403, 404, 405)
    assert response.status_code in allowed, (method, path, query, response.status_code)
    no_errors_logged(caplog)


# --- the API's authentication failures -------------------------------------------------------


def _segment(value: object) -> str:
    raw = value if isinstance(value, bytes) else dumps(value)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


JWT_LIKE = st.builds(
    lambda header, payload, signature: (
        f"{_segment(header)}.{_segment(payload)}.{_segment(signature)}"
    ),
    st.one_of(
        JSON,
        st.fixed_dictionaries(
            {
                "alg": st.sampled_from(["RS256", "none", "HS256", "ES256"]) | st.text(max_size=8),
                "kid": st.text(max_size=20) | JSON,
                "typ": st.just("JWT"),
            }
        ),
    ),
    st.one_of(
        JSON,
        st.fixed_dictionaries(
            {"sub": JSON, "exp": JSON, "iat": JSON, "iss": JSON, "aud": JSON, "roles": JSON}
        ),
    ),
    st.binary(max_size=300),
)
AUTHORIZATION = st.one_of(
    HEADER_TEXT, HEADER_TEXT.map(lambda t: "Bearer " + t), JWT_LIKE.map(lambda t: "Bearer " + t)
)
API_PATHS = [
    "/api/v1/environments/",
    "/api/v1/me/",
    "/api/v1/rollouts/",
    "/api/v1/audit/events/",
    "/api/v1/scheduler/nodes/",
    "/api/v1/teams/",
]


@FUZZ
@given(
    authorization=AUTHORIZATION,
    path=st.sampled_from(API_PATHS),
    method=st.sampled_from(["GET", "POST"]),
)
def test_any_authorization_that_is_not_a_valid_token_is_a_401(
    db, caplog, authorization, path, method
):
    caplog.set_level(logging.WARNING)
    response = client().generic(
        method, path, data=b"{}", content_type="application/json", HTTP_AUTHORIZATION=authorization
    )
    assert response.status_code in (401, 403), (
        authorization[:80],
        response.status_code,
        response.content[:300],
    )
    assert json_message(response)
    no_errors_logged(caplog)


# --- the tenant audit sink --------------------------------------------------------------------


@FUZZ
@given(
    public_id=PATH_TEXT.filter(bool).map(lambda t: quote(t, safe="")),
    body=st.one_of(st.binary(max_size=2000), JSON.map(dumps)),
    authorization=st.none() | HEADER_TEXT | JWT_LIKE.map(lambda t: "Bearer " + t),
)
def test_the_tenant_audit_sink_answers_anything_without_a_token_with_a_4xx(
    db, caplog, public_id, body, authorization
):
    caplog.set_level(logging.WARNING)
    headers = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}
    response = client().post(
        f"/hooks/tenant-audit/{public_id}/", data=body, content_type="application/json", **headers
    )
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    no_errors_logged(caplog)


# --- websocket handshakes ---------------------------------------------------------------------

WS_PATH = st.one_of(
    st.text(max_size=40).map(lambda t: "/ws/rollouts/" + t + "/"),
    st.text(max_size=40).map(lambda t: "/ws/" + t),
    st.text(max_size=40).map(lambda t: "/" + t),
)


def _handshake(path: str, query: bytes, extensions: dict | None) -> list[dict]:
    from kiln.asgi import application

    scope = {
        "type": "websocket",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogatepass"),
        "query_string": query,
        "headers": [(b"origin", b"http://testserver"), (b"host", b"testserver")],
        "subprotocols": [],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    if extensions is not None:
        scope["extensions"] = extensions

    async def run() -> list[dict]:
        socket = ApplicationCommunicator(application, scope)
        await socket.send_input({"type": "websocket.connect"})
        sent = [await socket.receive_output(5)]
        while sent[-1]["type"] == "websocket.http.response.start":
            sent.append(await socket.receive_output(5))
        if sent[0]["type"] != "websocket.http.response.start":
            # Accepted (the client leaves) or closed (the server answers the close with a
            # disconnect, as uvicorn does): either way the consumer hears the socket go.
            await socket.send_input({"type": "websocket.disconnect", "code": 1000})
        await socket.wait(5)  # the application returned: it raised nothing
        return sent

    return async_to_sync(run)()


@pytest.mark.django_db(transaction=True)
@FEW
@given(
    path=WS_PATH,
    token=st.none() | st.text(max_size=60) | JWT_LIKE,
    denial=st.booleans(),
)
def test_any_websocket_handshake_without_credentials_is_refused_cleanly(
    caplog, settings, path, token, denial
):
    # The in-memory channel layer: a refused stream's consumer still subscribes a channel, and
    # Redis's layer ends its blocking read (up to 5 s) before the application returns, which
    # the fuzzing would otherwise wait out for every example (test_stream.py covers Redis).
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    caplog.set_level(logging.WARNING)
    query = b"" if token is None else b"token=" + quote(token).encode()
    sent = _handshake(path, query, {"websocket.http.response": {}} if denial else None)
    first = sent[0]
    assert first["type"] in ("websocket.close", "websocket.http.response.start"), first
    if first["type"] == "websocket.http.response.start":
        assert 400 <= first["status"] < 500
    no_errors_logged(caplog)
