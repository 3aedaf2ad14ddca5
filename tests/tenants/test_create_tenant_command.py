from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from tenants.models import Membership, Role, Tenant

pytestmark = pytest.mark.django_db


def _run(*args: str) -> list[str]:
    out = StringIO()
    call_command("create_tenant", *args, stdout=out)
    return out.getvalue().strip().splitlines()


def test_creates_tenant_admin_and_prints_a_working_key_last():
    lines = _run(
        "initech", "--name", "Initech", "--admin-email", "boss@initech.test", "--admin-password", "pw-12345678"
    )
    tenant = Tenant.objects.get(slug="initech")
    assert tenant.name == "Initech"
    membership = Membership.objects.get(tenant=tenant)
    assert membership.role == Role.ADMIN and membership.user.is_staff
    assert membership.user.check_password("pw-12345678")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {lines[-1]}")
    assert client.get("/api/v1/whoami/").json()["tenant"] == "initech"


def test_running_twice_finds_the_tenant_and_issues_another_key():
    first = _run("initech")[-1]
    second = _run("initech")
    assert second[0].startswith("Found tenant initech")
    assert second[-1] != first
    assert Tenant.objects.filter(slug="initech").count() == 1


def test_bad_slug_is_a_clear_error():
    with pytest.raises(CommandError, match="Bad slug"):
        _run("Not A Slug")
