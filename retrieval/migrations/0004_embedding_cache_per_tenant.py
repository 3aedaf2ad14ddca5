"""The embedding cache becomes per tenant (see EmbeddingCacheEntry). Step 1 of 2: add the tenant, and give every
existing entry to each tenant whose chunks still have its text; an entry no chunk has any more is dropped (it is a
cache: the worst a missing entry costs is one encoding). Step 2 (0005) makes the tenant required. Two migrations,
because PostgreSQL refuses to alter a table in the transaction that wrote rows with deferred foreign-key checks."""

import django.db.models.deletion
from django.db import migrations, models

BATCH = 500


def entries_to_tenants(apps, schema_editor):
    """Two set-based statements, so the database joins the whole cache with the chunks' distinct texts once (a hash
    join on PostgreSQL) instead of looking the chunks up batch by batch without an index on the text hash alone."""
    entry_table = apps.get_model("retrieval", "EmbeddingCacheEntry")._meta.db_table
    chunk_table = apps.get_model("retrieval", "Chunk")._meta.db_table
    quote = schema_editor.connection.ops.quote_name
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(entry_table)} (tenant_id, model_name, text_hash, vector, created_at) "
            f"SELECT holders.tenant_id, e.model_name, e.text_hash, e.vector, e.created_at "
            f"FROM {quote(entry_table)} e "
            f"JOIN (SELECT DISTINCT tenant_id, content_hash FROM {quote(chunk_table)}) holders "
            f"ON holders.content_hash = e.text_hash "
            f"WHERE e.tenant_id IS NULL"
        )
        cursor.execute(f"DELETE FROM {quote(entry_table)} WHERE tenant_id IS NULL")


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
