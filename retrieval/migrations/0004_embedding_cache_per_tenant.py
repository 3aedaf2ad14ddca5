"""The embedding cache becomes per tenant (see EmbeddingCacheEntry). Step 1 of 2: add the tenant, and give every
existing entry to each tenant whose chunks still have its text; an entry no chunk has any more is dropped (it is a
cache: the worst a missing entry costs is one encoding). Step 2 (0005) makes the tenant required. Two migrations,
because PostgreSQL refuses to alter a table in the transaction that wrote rows with deferred foreign-key checks."""

from collections import defaultdict

import django.db.models.deletion
from django.db import migrations, models

BATCH = 500


def entries_to_tenants(apps, schema_editor):
    entry_model = apps.get_model("retrieval", "EmbeddingCacheEntry")
    chunk_model = apps.get_model("retrieval", "Chunk")
    last = 0
    while True:
        batch = list(
            entry_model.objects.filter(pk__gt=last, tenant__isnull=True)
            .order_by("pk")
            .values_list("pk", "model_name", "text_hash", "vector")[:BATCH]
        )
        if not batch:
            return
        last = batch[-1][0]
        holders = defaultdict(set)
        for tenant_id, content_hash in (
            chunk_model.objects.filter(content_hash__in={row[2] for row in batch})
            .values_list("tenant_id", "content_hash")
            .distinct()
        ):
            holders[content_hash].add(tenant_id)
        entry_model.objects.bulk_create(
            [
                entry_model(tenant_id=tenant_id, model_name=model_name, text_hash=text_hash, vector=vector)
                for _, model_name, text_hash, vector in batch
                for tenant_id in sorted(holders.get(text_hash, ()))
            ],
            ignore_conflicts=True,
        )
        entry_model.objects.filter(pk__in=[row[0] for row in batch]).delete()


def entries_to_shared(apps, schema_editor):
    """Backwards: one tenant-less entry per (model, text hash), as before."""
    entry_model = apps.get_model("retrieval", "EmbeddingCacheEntry")
    seen = set()
    duplicates = []
    for pk, model_name, text_hash in entry_model.objects.order_by("pk").values_list("pk", "model_name", "text_hash"):
        if (model_name, text_hash) in seen:
            duplicates.append(pk)
        seen.add((model_name, text_hash))
    for start in range(0, len(duplicates), BATCH):
        entry_model.objects.filter(pk__in=duplicates[start : start + BATCH]).delete()
    entry_model.objects.update(tenant=None)


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0003_ingestion_claims_cache_reindex"),
        ("tenants", "0002_tenant_settings_version"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="embeddingcacheentry", name="embedding_cache_unique_model_text"),
        migrations.AddField(
            model_name="embeddingcacheentry",
            name="tenant",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="tenants.tenant",
            ),
        ),
        migrations.AddIndex(
            model_name="chunk",
            index=models.Index(fields=["tenant", "content_hash"], name="chunk_tenant_content_hash"),
        ),
        migrations.RunPython(entries_to_tenants, entries_to_shared),
    ]
