"""One error shape: JSON {code, message, extra} for the API, a page for people."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_unknown_api_path_is_json_not_found(client):
    response = client.get("/api/v1/no-such-thing/")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"code": "not_found", "message": "Not found.", "extra": {}}


def test_unknown_page_is_the_html_404_page(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert "Page not found" in html
    assert 'href="/"' in html


def test_json_clients_get_json_404_anywhere(client):
    response = client.get("/no-such-page/", HTTP_ACCEPT="application/json")
    assert response.json()["code"] == "not_found"


def test_wrong_method_is_405_in_the_error_shape(api_client_for):
    response = api_client_for("engineer").delete("/api/v1/me/")
    assert response.status_code == 405
    assert response.json() == {
        "code": "method_not_allowed",
        "message": 'Method "DELETE" not allowed.',
        "extra": {},
    }


def test_malformed_json_body_is_400_malformed(api_client_for):
    response = api_client_for("platform-admin", sub="root").post(
        "/api/v1/teams/", data="{not json", content_type="application/json"
    )
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "malformed"
    assert body["message"].startswith("JSON parse error")
    assert body["extra"] == {}


def test_unsupported_media_type_is_415(api_client_for):
    response = api_client_for("platform-admin", sub="root").post(
        "/api/v1/teams/", data="slug: x", content_type="application/yaml"
    )
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


def test_api_root_lists_the_identity_routes(client):
    body = client.get("/api/v1/").json()
    assert body["schema"] == "/api/schema/" and body["docs"] == "/api/docs/"
    assert {"/api/v1/me/", "/api/v1/teams/", "/api/v1/teams/<slug:slug>/members/"} <= set(
        body["routes"]
    )


def test_favicon_ico_points_at_the_svg_icon(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"] == "/static/kiln/favicon.svg"
    assert client.get("/static/kiln/favicon.svg").status_code == 200
