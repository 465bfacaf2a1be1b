"""The OpenAPI document and the Swagger UI that renders it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from drf_spectacular.validation import validate_schema

pytestmark = pytest.mark.django_db


def test_schema_is_a_valid_openapi_3_document_listing_the_routes(client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    validate_schema(document)  # raises jsonschema.ValidationError when invalid
    paths = document["paths"]
    assert {"/api/v1/me/", "/api/v1/teams/", "/api/v1/teams/{slug}/members/"} <= set(paths)
    assert set(paths["/api/v1/teams/"]) >= {"get", "post"}
    assert document["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT (RS256)",
    }
    create = paths["/api/v1/teams/"]["post"]
    assert create["responses"]["201"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Team"
    }


def test_schema_yaml_is_served_too(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    assert response.content.startswith(b"openapi: 3.")


def test_docs_page_loads_swagger_from_our_own_static_files(client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    scripts = re.findall(r'<script src="([^"]+)"', html)
    assert any(s.startswith("/static/drf_spectacular_sidecar/swagger-ui-dist/") for s in scripts)
    assert "/api/docs/?script=" in scripts
    assert "/static/kiln/swagger.css" in html
    init = client.get("/api/docs/?script=")
    assert init.status_code == 200
    assert init["Content-Type"].startswith("application/javascript")
    assert '"/api/schema/"' in init.content.decode()
    for src in scripts[:2]:
        assert client.get(src).status_code == 200


# --- the schema tells the truth ----------------------------------------------------------

METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture(scope="module")
def document(django_db_blocker) -> dict:
    from drf_spectacular.generators import SchemaGenerator

    with django_db_blocker.unblock():
        return SchemaGenerator().get_schema(request=None, public=True)


def operations(document: dict):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield path, method, operation


def resolve(document: dict, schema: dict) -> dict:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def test_schema_generates_without_warnings_and_validates():
    from django.core.management import call_command

    # --fail-on-warn: a component name used by two shapes, an untyped view, an enum collision
    # all fail here.
    call_command("spectacular", "--fail-on-warn", "--validate", "--file", "/dev/null")


def test_every_operation_documents_its_errors_in_the_one_error_shape(document):
    error = document["components"]["schemas"]["Error"]
    assert set(error["required"]) == {"code", "message", "extra"}
    for path, method, operation in operations(document):
        responses = operation["responses"]
        errors = {code for code in responses if code.startswith(("4", "5"))}
        assert {"401"} <= errors, (path, method)
        if operation["operationId"] != "me_retrieve":
            assert "403" in errors, (path, method)
        if "{" in path:
            assert "404" in errors, (path, method)
        if "requestBody" in operation or any(
            p["in"] == "query" for p in operation.get("parameters", [])
        ):
            assert "400" in errors, (path, method)
        for code in errors:
            content = responses[code]["content"]
            assert content == {
                "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
            }
        assert responses["401"]["headers"]["WWW-Authenticate"]["required"] is True


def test_every_success_response_is_typed(document):
    for path, method, operation in operations(document):
        successes = {c: r for c, r in operation["responses"].items() if c.startswith("2")}
        assert successes, (path, method)
        for code, response in successes.items():
            for media_type, body in response["content"].items():
                schema = resolve(document, body["schema"])
                if media_type in ("text/csv", "application/x-ndjson"):
                    assert schema == {"type": "string"}
                    continue
                if schema.get("type") == "array":
                    schema = resolve(document, schema["items"])
                # An object with declared properties, never a bare `object`.
                assert schema.get("properties"), (path, method, code)


@pytest.mark.parametrize(
    ("path", "method", "code"),
    [
        ("/api/v1/canary/services/", "post", "201"),
        ("/api/v1/rollouts/", "post", "201"),
        ("/api/v1/rollouts/{rollout_id}/observations/", "post", "202"),
        ("/api/v1/chaos/experiments/", "post", "201"),
        ("/api/v1/environments/", "post", "201"),
        ("/api/v1/environments/{public_id}/", "delete", "202"),
        ("/api/v1/teams/", "post", "201"),
    ],
)
def test_operations_document_the_success_code_they_answer(document, path, method, code):
    responses = document["paths"][path][method]["responses"]
    assert code in responses
    assert not any(
        c.startswith("2") and c != code
        for c in responses
        # An Idempotency-Key's replay answers 200 where the first submission answered 201.
        if path not in ("/api/v1/environments/", "/api/v1/chaos/experiments/")
    )


def test_every_write_documents_a_json_request_body(document):
    for path, method, operation in operations(document):
        if method in ("post", "put", "patch"):
            body = operation["requestBody"]
            assert set(body["content"]) == {"application/json"}, (path, method)
            assert resolve(document, body["content"]["application/json"]["schema"])["properties"]


def test_no_two_operations_share_a_request_component_of_different_shape(document):
    create = document["paths"]["/api/v1/chaos/experiments/"]["post"]["requestBody"]
    abort = document["paths"]["/api/v1/chaos/experiments/{experiment_id}/abort/"]["post"][
        "requestBody"
    ]
    create_ref = create["content"]["application/json"]["schema"]["$ref"]
    abort_ref = abort["content"]["application/json"]["schema"]["$ref"]
    assert create_ref != abort_ref
    assert set(resolve(document, {"$ref": abort_ref})["properties"]) == {"reason"}
    assert "fault" in resolve(document, {"$ref": create_ref})["properties"]


def test_limits_the_api_enforces_are_in_the_schema(document):
    schemas = document["components"]["schemas"]
    env = schemas["EnvironmentCreateRequest"]
    assert env["additionalProperties"] is False
    assert env["properties"]["cpu"]["minimum"] == 1 and env["properties"]["cpu"]["maximum"] == 256
    assert env["properties"]["ttl_hours"]["maximum"] == 8760
    assert env["properties"]["name"]["pattern"] == "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    assert schemas["EnvironmentExtendRequest"]["properties"]["hours"] == {
        "type": "integer",
        "maximum": 8760,
        "minimum": 1,
    }
    chaos = schemas["ExperimentCreateRequest"]["properties"]
    assert chaos["max_duration_seconds"]["maximum"] == 86400
    assert chaos["abort_http_status"]["minimum"] == 400
    rollout = schemas["RolloutCreateRequest"]["properties"]
    assert rollout["steps"]["items"] == {"type": "integer", "minimum": 1, "maximum": 100}
    assert (
        resolve(document, schemas["Environment"]["properties"]["status"])["enum"][0] == "SUBMITTED"
    )


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/environments/",
        "/api/v1/rollouts/",
        "/api/v1/chaos/experiments/",
        "/api/v1/audit/events/",
    ],
)
def test_pagination_parameters_have_their_ranges(document, path):
    parameters = {p["name"]: p["schema"] for p in document["paths"][path]["get"]["parameters"]}
    assert parameters["limit"]["minimum"] == 1 and parameters["limit"]["maximum"] == 500
    if "offset" in parameters:
        assert parameters["offset"]["minimum"] == 0


# Component names that say nothing of their subject (a view's nested InputSerializer, a field
# named `kind` or `state`): each must name what it describes, as "EnvironmentExtendRequest" does.
GENERIC_NAME = re.compile(
    r"^(Input|Output|Reason|Reject|Extend|Defer|Keep|Kind|Stage|State|Outcome|Decision|Status)"
    r"(Input)?(Request|Enum)?$|Input(Request)?$|Serializer"
)


def test_no_component_has_a_generic_name(document):
    generic = [n for n in document["components"]["schemas"] if GENERIC_NAME.search(n)]
    assert generic == []


def test_every_component_is_named_by_the_decorator_not_meta_ref_name():
    # One way to name a component: a serializer with Meta.ref_name (in any form: a class body,
    # a one-line Meta, a dict handed to type()) is named another way, and a reader grepping for
    # `component_name=` would miss it.
    named_by_meta = [
        str(path.relative_to(settings.BASE_DIR))
        for app in ("kiln", "portal", "canary", "scheduler", "audit", "bench")
        for path in (Path(settings.BASE_DIR) / app).rglob("*.py")
        if re.search(r"\bref_name\b", path.read_text())
    ]
    assert named_by_meta == []


def test_the_rollout_list_answers_a_typed_page_of_rollouts(document):
    ok = document["paths"]["/api/v1/rollouts/"]["get"]["responses"]["200"]
    page = resolve(document, ok["content"]["application/json"]["schema"])
    assert set(page["properties"]) == {"count", "next", "previous", "results"}
    assert page["properties"]["results"]["items"] == {"$ref": "#/components/schemas/Rollout"}


def test_export_documents_both_content_types_and_its_attachment_header(document):
    ok = document["paths"]["/api/v1/audit/export"]["get"]["responses"]["200"]
    assert set(ok["content"]) == {"application/x-ndjson", "text/csv"}
    assert ok["headers"]["Content-Disposition"]["required"] is True


def test_an_error_the_api_answers_has_the_documented_shape(api_client_for, document):
    response = api_client_for("engineer", sub="erin").get("/api/v1/environments/?limit=0")
    assert response.status_code == 400
    body = response.json()
    schema = document["components"]["schemas"]["Error"]
    assert set(body) == set(schema["properties"]) and isinstance(body["extra"], dict)
