"""The OpenAPI document and the Swagger UI that renders it."""

from __future__ import annotations

import re

import pytest
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
