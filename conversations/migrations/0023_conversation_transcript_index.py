"""The partial index a chat request's transcript finds its conversation through (tenant, transcript_digest; only the
conversations a chat-completions turn touched), built without stopping turns (CREATE INDEX CONCURRENTLY on
PostgreSQL: kbplatform/migration_indexes.py)."""

from django.db import migrations, models

from kbplatform.migration_indexes import index_add_concurrently


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("conversations", "0022_conversation_transcript_digest"),
    ]

    operations = [
        index_add_concurrently(
            app_label="conversations",
            model_name="conversation",
            index=models.Index(
                fields=["tenant", "transcript_digest"],
                name="conversation_transcript",
                condition=~models.Q(transcript_digest=""),
            ),
        ),
    ]
