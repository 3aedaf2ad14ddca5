"""A knowledge-base re-index is leased as a document's indexing run is (claim token, lease renewed per batch,
attempts), so a lost run is noticed when its lease runs out rather than after an hour. A re-index running during the
upgrade gets a lease from its last move, so it is judged by the same rule as the ones started afterwards."""

from datetime import timedelta

from django.conf import settings
from django.db import migrations, models
from django.db.models import F


def running_reindexes_lease(apps, schema_editor):
    knowledge_base_model = apps.get_model("retrieval", "KnowledgeBase")
    knowledge_base_model.objects.filter(reindex_status="running").update(
        reindex_lease_expires_at=F("updated_at") + timedelta(seconds=settings.INGEST_LEASE_SECONDS)
    )


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0006_embedding_cache_keyed_by_model_identity"),
    ]

    operations = [
        migrations.AddField(
            model_name="knowledgebase",
            name="reindex_attempts",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="knowledgebase",
            name="reindex_claim_token",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
        migrations.AddField(
            model_name="knowledgebase",
            name="reindex_lease_expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(running_reindexes_lease, migrations.RunPython.noop, elidable=True),
    ]
