"""Seed the built-in intents and a default dedup policy for every tenant created before this app existed.
New tenants are seeded by lifecycle.services.tenant_get_or_create. Idempotent: existing rows are left alone."""

from django.db import migrations


def seed(apps, schema_editor):
    from conversations.dedup.builtins import BUILTIN_INTENTS

    Tenant = apps.get_model("tenants", "Tenant")
    DedupPolicy = apps.get_model("conversations", "DedupPolicy")
    Intent = apps.get_model("conversations", "Intent")
    for tenant in Tenant.objects.all():
        DedupPolicy.objects.get_or_create(tenant=tenant)
        for name, spec in BUILTIN_INTENTS.items():
            Intent.objects.get_or_create(
                tenant=tenant,
                name=name,
                defaults={"behaviour": spec["behaviour"], "examples": list(spec["examples"]), "is_builtin": True},
            )


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0001_initial"),
        ("tenants", "0001_initial"),
    ]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
