"""The OpenAPI document says what the server enforces: it is a valid OpenAPI document by
openapi-spec-validator, every `default` satisfies its own schema, and every request body is
closed (`additionalProperties: false`) because the server refuses a field it does not know,
with a 400 naming it."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest
from openapi_schema_validator import OAS30Validator
from openapi_spec_validator import validate

from tests.kiln.test_schemathesis import fuzz_settings, world  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db

UNKNOWN = "surely_not_a_field"


@pytest.fixture
def document(client) -> dict[str, Any]:
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


def _defaults(node: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (location, schema) in the document whose schema carries a `default`."""
    if isinstance(node, dict):
        if "default" in node and isinstance(node.get("default"), (str, int, float, bool, list)):
            yield where, node
        for key, value in node.items():
            yield from _defaults(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _defaults(value, f"{where}/{i}")


def _request_bodies(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody") if isinstance(operation, dict) else None
            if body:
                for media in body["content"].values():
                    yield path, method, media["schema"]


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def test_the_schema_is_valid_by_openapi_spec_validator(document):
    validate(document)  # raises OpenAPIValidationError naming the first problem


def test_every_default_satisfies_its_own_schema(document):
    """A strict client validates defaults too: `host: {minLength: 1, default: ""}` was refused."""
    found, wrong = 0, []
    for where, schema in _defaults(document, ""):
        found += 1
        own = {k: v for k, v in schema.items() if k != "default"}
        # The root carries the components, so a `$ref` inside the schema resolves.
        root = {**copy.deepcopy(own), "components": document["components"]}
        errors = list(OAS30Validator(root).iter_errors(schema["default"]))
        if errors:
            wrong.append(f"{where}: {schema['default']!r}: {errors[0].message}")
    assert found > 10  # the walk reached the parameters and the request bodies
    assert wrong == []


def test_every_request_body_is_closed_to_unknown_fields(document):
    open_bodies = [
        f"{method.upper()} {path}"
        for path, method, schema in _request_bodies(document)
        if _resolve(document, schema).get("additionalProperties") is not False
    ]
    assert open_bodies == []


def test_a_nested_request_object_is_closed_too(document):
    schemas = document["components"]["schemas"]
    stop = schemas["ExperimentCreateRequest"]["properties"]["stop_conditions"]["items"]
    assert _resolve(document, stop).get("additionalProperties") is False


def test_every_request_body_answers_an_unknown_field_with_a_400_naming_it(
    document,
    world,  # noqa: F811 - the fixture imported above
    api_client_for,
):
    api = api_client_for("platform-admin", "engineer", sub="root", team="payments")
    answers = {}
    for path, method, _ in _request_bodies(document):
        url = re.sub(r"\{(\w+)\}", lambda m: world[m.group(1)], path)
        response = getattr(api, method)(url, {UNKNOWN: 1}, format="json")
        fields = response.json().get("extra", {}).get("fields", {}) if response.content else {}
        answers[f"{method.upper()} {path}"] = (response.status_code, fields.get(UNKNOWN))
    assert len(answers) >= 17
    refused = {op: answer for op, answer in answers.items() if answer != (400, ["Unknown field."])}
    assert refused == {}
