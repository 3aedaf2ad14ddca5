"""The embedding cache is keyed by the model's identity (`embeddings.model_identity()`: name@digest of its files)
instead of its directory's name. Entries keyed by a name alone cannot be told apart from another model's that had
the same name, so they go: a re-index encodes their texts again once, under the new key. Left in place, no lookup
would use them and the purge would keep them for as long as a chunk has their text."""

from django.db import migrations


def name_keyed_entries_delete(apps, schema_editor):
    entry_model = apps.get_model("retrieval", "EmbeddingCacheEntry")
    entry_model.objects.exclude(model_name__contains="@").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0005_embedding_cache_tenant_required"),
    ]

    operations = [migrations.RunPython(name_keyed_entries_delete, migrations.RunPython.noop, elidable=True)]
