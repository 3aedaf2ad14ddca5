import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0018_review_pick_inclusion_probability"),
        ("retrieval", "0017_knowledge_base_text_index_lease"),
        ("tenants", "0003_api_key_scopes"),
    ]

    operations = [
        migrations.AddField(
            model_name="dedupevent",
            name="curated_answer_ref",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="dedupevent",
            name="curated_question",
            field=models.TextField(
                blank=True, db_default="", default="", help_text="The curated phrasing the question was matched with."
            ),
        ),
        migrations.CreateModel(
            name="CuratedAnswer",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("answer", models.TextField()),
                ("enabled", models.BooleanField(default=True)),
                ("external_id", models.CharField(blank=True, max_length=255, null=True)),
                ("source_chunks", models.JSONField(blank=True, default=dict)),
                ("source_chunk_ids", models.JSONField(blank=True, default=list)),
                ("revision", models.PositiveIntegerField(default=1)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "knowledge_base",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="curated_answers",
                        to="retrieval.knowledgebase",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="tenants.tenant"
                    ),
                ),
            ],
            options={
                "ordering": ["knowledge_base_id", "id"],
            },
        ),
        migrations.AddField(
            model_name="dedupevent",
            name="curated_answer",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="conversations.curatedanswer",
            ),
        ),
        migrations.AddField(
            model_name="turn",
            name="curated_answer",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="conversations.curatedanswer",
            ),
        ),
        migrations.CreateModel(
            name="CuratedPhrasing",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("question", models.TextField()),
                ("vector", models.BinaryField(help_text="float32 little-endian, L2-normalised")),
                ("vector_model", models.CharField(blank=True, default="", max_length=16)),
                (
                    "curated_answer",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="phrasings",
                        to="conversations.curatedanswer",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="tenants.tenant"
                    ),
                ),
            ],
            options={
                "ordering": ["curated_answer_id", "id"],
            },
        ),
        migrations.AddIndex(
            model_name="curatedanswer",
            index=models.Index(fields=["tenant", "knowledge_base", "enabled"], name="curated_tenant_kb_enabled"),
        ),
        migrations.AddConstraint(
            model_name="curatedanswer",
            constraint=models.UniqueConstraint(
                fields=("knowledge_base", "external_id"), name="curated_answer_unique_external_id"
            ),
        ),
    ]
