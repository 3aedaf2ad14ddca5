from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tenants.keys import key_hash, key_prefix
from tenants.models import ApiKey, Tenant
from tenants.selectors import api_key_get_by_raw
from tenants.services import api_key_create, api_key_revoke

pytestmark = pytest.mark.django_db


def test_key_is_stored_only_as_hash_with_visible_prefix(tenant):
    api_key, raw_key = api_key_create(tenant=tenant, name="ci")
    stored = ApiKey.objects.for_tenant(tenant).get(pk=api_key.pk)
    assert raw_key.startswith(f"kb_{stored.prefix}_")
    assert stored.hashed_key == key_hash(raw_key)
    assert raw_key not in {getattr(stored, f.attname) for f in ApiKey._meta.concrete_fields}
    assert key_prefix(raw_key) == stored.prefix


def test_the_key_lookup_reads_what_the_orm_reads_in_one_query(tenant, other_tenant, django_assert_num_queries):
    api_key_create(tenant=other_tenant, name="other")
    api_key, raw_key = api_key_create(tenant=tenant, name="ci", scopes=["chat", "ingest"])
    ApiKey.objects.for_tenant(tenant).filter(pk=api_key.pk).update(last_used_at=timezone.now())
    expected = ApiKey.objects.unscoped().select_related("tenant").get(pk=api_key.pk)
    with django_assert_num_queries(1):
        found = api_key_get_by_raw(raw_key=raw_key)
        tenant_of_key = found.tenant  # loaded with the key, not read again
    for field in ApiKey._meta.concrete_fields:
        assert getattr(found, field.attname) == getattr(expected, field.attname), field.name
    for field in Tenant._meta.concrete_fields:
        assert getattr(tenant_of_key, field.attname) == getattr(expected.tenant, field.attname), field.name
    assert not found._state.adding and found._state.db == expected._state.db
    found.name = "renamed"
    found.save(update_fields=["name"])  # an instance the ORM can write back, as a queryset's is
    assert ApiKey.objects.for_tenant(tenant).get(pk=api_key.pk).name == "renamed"


def test_the_key_lookup_refuses_an_unknown_prefix_and_a_wrong_secret(tenant):
    _, raw_key = api_key_create(tenant=tenant, name="ci")
    prefix = key_prefix(raw_key)
    assert api_key_get_by_raw(raw_key=f"kb_{prefix}_wrong") is None
    assert api_key_get_by_raw(raw_key=f"kb_{'z' * len(prefix)}_{raw_key.split('_', 2)[2]}") is None
    assert api_key_get_by_raw(raw_key=raw_key) is not None


def test_whoami_reports_tenant_and_prefix(api_client, tenant):
    response = api_client.get("/api/v1/whoami/")
    assert response.status_code == 200
    assert response.json()["tenant"] == tenant.slug
    assert response.json()["key_prefix"] == api_client.api_key.prefix


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "Missing API key"),
        ("Bearer abc", "Authorization: Api-Key"),
        ("Api-Key ", "empty"),
        ("Api-Key kb_nothere1_secret", "not valid"),
        ("Api-Key garbage", "not valid"),
        ("Api-Key kb_\x00\x00\x00\x00\x00\x00\x00\x00_secret", "not valid"),  # PostgreSQL cannot compare NUL
        ("Api-Key kb_abc\xe9defg_secret", "not valid"),
    ],
)
def test_bad_keys_are_401_with_message(db, header, message):
    client = APIClient()
    if header is not None:
        client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/whoami/")
    assert response.status_code == 401
    assert message in response.json()["message"]
    assert response.json()["extra"] == {}


@pytest.mark.parametrize(
    ("raw_key", "prefix"),
    [
        ("kb_abcd1234_secret", "abcd1234"),
        ("kb_abcd1234_sec_ret", "abcd1234"),
        ("kb_abcd123_secret", None),
        ("kb_abcd1234_", None),
        ("kb_ABCD1234_secret", None),
        ("kb_abcd\x00234_secret", None),
        ("kb_abcd-234_secret", None),
        ("xx_abcd1234_secret", None),
        ("", None),
    ],
)
def test_key_prefix_only_of_well_formed_keys(raw_key, prefix):
    assert key_prefix(raw_key) == prefix


def test_right_prefix_wrong_secret_is_401(api_client):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key kb_{api_client.api_key.prefix}_wrongsecret")
    assert client.get("/api/v1/whoami/").status_code == 401


def test_revoked_key_is_401(api_client, tenant):
    api_key_revoke(tenant=tenant, api_key=api_client.api_key)
    response = api_client.get("/api/v1/whoami/")
    assert response.status_code == 401
    assert "revoked" in response.json()["message"]


def test_disabled_tenant_key_is_401(api_client, tenant):
    tenant.is_active = False
    tenant.save()
    assert "disabled" in api_client.get("/api/v1/whoami/").json()["message"]


def test_last_used_is_recorded_and_throttled(api_client, tenant):
    assert api_client.api_key.last_used_at is None
    api_client.get("/api/v1/whoami/")
    first = ApiKey.objects.for_tenant(tenant).get(pk=api_client.api_key.pk).last_used_at
    assert first is not None
    api_client.get("/api/v1/whoami/")
    assert ApiKey.objects.for_tenant(tenant).get(pk=api_client.api_key.pk).last_used_at == first
    ApiKey.objects.for_tenant(tenant).filter(pk=api_client.api_key.pk).update(last_used_at=first - timedelta(minutes=5))
    api_client.get("/api/v1/whoami/")
    assert ApiKey.objects.for_tenant(tenant).get(pk=api_client.api_key.pk).last_used_at > first - timedelta(minutes=1)
    assert ApiKey.objects.for_tenant(tenant).get(pk=api_client.api_key.pk).last_used_at <= timezone.now()
