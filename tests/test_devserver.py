"""`make run`'s demo tenant: the arguments `kbplatform.devserver` gives `manage.py create_tenant` read back as the
values it meant, whatever characters the generated password holds."""

import pytest

from kbplatform.devserver import demo_tenant_args
from lifecycle.management.commands.create_tenant import Command


@pytest.mark.parametrize("password", ["-4Mp2MGL0lP1", "--name", "plain_Pass-word", "a=b"])
def test_the_demo_tenants_arguments_read_back_as_given(password):
    """A password beginning with "-" (one in 64 that `secrets.token_urlsafe` makes) was read as an option, and
    `make run` stopped before printing a login."""
    args = demo_tenant_args(email="admin@demo.local", password=password)
    parsed = Command().create_parser("manage.py", args[0]).parse_args(args[1:])
    assert (parsed.slug, parsed.name, parsed.admin_email, parsed.admin_password) == (
        "demo",
        "Demo",
        "admin@demo.local",
        password,
    )
