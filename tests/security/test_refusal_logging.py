"""Every refusal (401, 403, 404, 429) leaves one structured log line naming who was refused and why."""

import json

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_401_names_the_claimed_key_prefix_never_the_secret(refusals, api_client):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key kb_{api_client.api_key.prefix}_wrong-secret")
    assert client.get("/api/v1/whoami/").status_code == 401
    [line] = refusals()
    assert line["status"] == 401 and line["key_prefix"] == api_client.api_key.prefix
    assert line["path"] == "/api/v1/whoami/" and line["method"] == "GET" and line["tenant"] is None
    assert "wrong-secret" not in json.dumps(line)


def test_401_without_a_key(refusals, db):
    assert APIClient().get("/api/v1/whoami/").status_code == 401
    [line] = refusals()
    assert line["status"] == 401 and line["key_prefix"] is None and "Missing API key" in line["reason"]


def test_403_and_404_name_the_tenant_and_key(refusals, standard_api_client, api_client, other_api_client, tenant):
    assert standard_api_client.get("/api/v1/api-keys/").status_code == 403
    assert api_client.get(f"/api/v1/api-keys/{other_api_client.api_key.pk}/").status_code == 404
    forbidden, not_found = refusals()
    assert forbidden["status"] == 403 and forbidden["tenant"] == tenant.slug
    assert forbidden["key_prefix"] == standard_api_client.api_key.prefix
    assert not_found["status"] == 404 and not_found["key_prefix"] == api_client.api_key.prefix
    assert not_found["path"] == f"/api/v1/api-keys/{other_api_client.api_key.pk}/"


def test_429_is_logged(refusals, redis_available, api_client, tenant):
    with override_settings(RATE_LIMIT_DEFAULT="1/min", RATE_LIMIT_BURST=1):
        assert api_client.get("/api/v1/whoami/").status_code == 200
        assert api_client.get("/api/v1/whoami/").status_code == 429
    [line] = refusals()
    assert line["status"] == 429 and line["tenant"] == tenant.slug


def test_successes_and_validation_errors_are_not_refusals(refusals, api_client):
    assert api_client.get("/api/v1/whoami/").status_code == 200
    assert api_client.post("/api/v1/api-keys/", {}, format="json").status_code == 400
    assert refusals() == []
