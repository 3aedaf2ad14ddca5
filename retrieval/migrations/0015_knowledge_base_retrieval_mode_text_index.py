"""Retrieval modes, and whether a knowledge base's chunks carry their text in Milvus. The columns' database defaults
(`semantic`, `missing`) are what every knowledge base that exists gets, and what the last release's web and workers
insert while this runs: their chunks are in the collection of vectors only, so they search as they did until
`manage.py text_index` moves them over. A knowledge base made from now on is `ready` and `hybrid` (Django's defaults)."""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0014_document_list_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="knowledgebase",
            name="hybrid_dense_weight",
            field=models.FloatField(
                blank=True,
                help_text="Hybrid only: blank fuses by rank (RRF); a number from 0 to 1 weighs the vector side's scores.",
                null=True,
                validators=[
                    django.core.validators.MinValueValidator(0.0),
                    django.core.validators.MaxValueValidator(1.0),
                ],
            ),
        ),
        migrations.AddField(
            model_name="knowledgebase",
            name="retrieval_mode",
            field=models.CharField(
                choices=[
                    ("semantic", "semantic (vectors)"),
                    ("full_text", "full text (BM25)"),
                    ("hybrid", "hybrid (vectors and BM25, fused)"),
                ],
                db_default="semantic",
                default="hybrid",
                max_length=10,
            ),
        ),
        migrations.AddField(
            model_name="knowledgebase",
            name="text_analyzer",
            field=models.CharField(
                choices=[("english", "English"), ("chinese", "Chinese (jieba)")],
                db_default="english",
                default="english",
                max_length=10,
            ),
        ),
        migrations.AddField(
            model_name="knowledgebase",
            name="text_index",
            field=models.CharField(
                choices=[("ready", "Ready"), ("missing", "Missing"), ("building", "Building")],
                db_default="missing",
                default="ready",
                max_length=10,
            ),
        ),
        migrations.AddField(
            model_name="knowledgebase",
            name="text_index_error",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
        migrations.AddField(
            model_name="knowledgebase",
            name="text_index_progress",
            field=models.FloatField(db_default=0.0, default=0.0),
        ),
    ]
