"""`make run`'s demo tenant: the arguments `kbplatform.devserver` gives `manage.py create_tenant` read back as the
values it meant, whatever characters the generated password holds; those it gives `manage.py ingest` for the demo
help centres name folders that hold documents and models the deployment offers."""

import pytest
from django.conf import settings

from kbplatform.devserver import demo_ingest_args, demo_tenant_args
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


def test_the_demo_help_centres_are_an_english_and_a_chinese_knowledge_base_of_offered_models():
    from retrieval.management.commands.ingest import Command as Ingest

    parsed = [Ingest().create_parser("manage.py", args[0]).parse_args(args[1:]) for args in demo_ingest_args()]
    assert [(p.tenant, p.embedding_model, p.text_analyzer, p.no_wait) for p in parsed] == [
        ("demo", "all-MiniLM-L6-v2", "english", True),
        ("demo", "use-multilingual-v3", "chinese", True),
    ]
    for p in parsed:
        assert p.embedding_model in settings.EMBEDDING_MODELS
        assert len(list(p.path.glob("*.md"))) == 4
