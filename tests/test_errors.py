import pytest

pytestmark = pytest.mark.django_db


def test_unknown_api_path_is_json_404(api_client):
    response = api_client.get("/api/v1/does-not-exist/")
    assert response.status_code == 404
    assert response.json()["message"] == "Not found."


def test_malformed_json_is_400_with_shape(api_client):
    """Sent to an endpoint that takes POST, so the JSON parser reads the body (a GET-only path refuses with 405
    before any parser runs)."""
    response = api_client.generic("POST", "/api/v1/knowledge-bases/", "{not json", content_type="application/json")
    assert response.status_code == 400
    body = response.json()
    assert set(body) == {"message", "extra"}
    assert body["message"].startswith("The request body is not valid JSON:"), body


def test_method_not_allowed_has_shape(api_client):
    response = api_client.delete("/api/v1/whoami/")
    assert response.status_code == 405
    assert set(response.json()) == {"message", "extra"}


def test_schema_and_docs_are_served(client):
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize(
    "method, path",
    [("post", "/api/v1/conversations"), ("put", "/api/v1/dedup-policy"), ("post", "/api/v1/turns/1/answer")],
)
def test_a_write_to_an_api_path_without_its_trailing_slash_is_a_404_that_names_the_path(
    api_client, settings, debug, method, path
):
    """Django's APPEND_SLASH answered these with an empty 301 (clients follow it as a GET, which is a baffling 405
    "GET not allowed", and the body is lost) or, with DEBUG on as in development, a 500 RuntimeError."""
    settings.DEBUG = debug
    response = getattr(api_client, method)(path, {"threshold": 0.5}, format="json")
    assert response.status_code == 404
    body = response.json()
    assert f"{path}/" in body["message"] and body["extra"]["path"] == path


def test_a_read_of_an_api_path_without_its_trailing_slash_still_redirects(api_client):
    """A GET loses nothing by following the redirect."""
    response = api_client.get("/api/v1/audit-events?limit=1")
    assert response.status_code == 301 and response["Location"] == "/api/v1/audit-events/?limit=1"
