from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0015_knowledge_base_retrieval_mode_text_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="chunk",
            name="enabled",
            field=models.BooleanField(db_default=True, default=True),
        ),
        migrations.AddField(
            model_name="document",
            name="metadata",
            field=models.JSONField(blank=True, db_default={}, default=dict),
        ),
        migrations.AddField(
            model_name="document",
            name="split_oversize_chunks",
            field=models.BooleanField(db_default=False, default=False),
        ),
    ]
