import pytest

pytestmark = pytest.mark.django_db


def test_unknown_api_path_is_json_404(api_client):
    response = api_client.get("/api/v1/does-not-exist/")
    assert response.status_code == 404
    assert response.json()["message"] == "Not found."


def test_malformed_json_is_400_with_shape(api_client):
    response = api_client.generic("POST", "/api/v1/whoami/", "{not json", content_type="application/json")
    assert response.status_code in (400, 405)
    body = response.json()
    assert set(body) == {"message", "extra"}


def test_method_not_allowed_has_shape(api_client):
    response = api_client.delete("/api/v1/whoami/")
    assert response.status_code == 405
    assert set(response.json()) == {"message", "extra"}


def test_schema_and_docs_are_served(client):
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200
