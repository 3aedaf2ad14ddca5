"""The index the document list reads its pages off (tenant, knowledge base, newest first), built without stopping
uploads or indexing (CREATE INDEX CONCURRENTLY on PostgreSQL: kbplatform/migration_indexes.py)."""

from django.db import migrations, models

from kbplatform.migration_indexes import index_add_concurrently


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("retrieval", "0013_ingest_queue_marker"),
    ]

    operations = [
        index_add_concurrently(
            app_label="retrieval",
            model_name="document",
            index=models.Index(
                fields=["tenant", "knowledge_base", "-created_at", "-id"], name="document_kb_newest_first"
            ),
        ),
    ]
