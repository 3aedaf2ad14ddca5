"""A lease on the move of a knowledge base to full text, so a move whose run was lost is queued again by the
minute's recovery sweep instead of staying `building` until an operator runs `manage.py text_index` again."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0016_document_metadata_chunk_enabled"),
    ]

    operations = [
        migrations.AddField(
            model_name="knowledgebase",
            name="text_index_attempts",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="knowledgebase",
            name="text_index_lease_expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
