"""The model a knowledge base's re-index moved it from, so a re-index that stopped part way while changing the model
(old and new vectors side by side: refused) is told apart from a rebuild that kept it (every vector the model's).

A re-index that failed before the upgrade, or was running at it, may have been changing the model: which one is not
recorded, so it is marked "unrecorded" and counts as one that was (its searches are refused until it is re-indexed,
rather than ranking vectors of two models). A run that finishes clears the mark.

The column keeps its default in the database (`db_default`), not only in Django: the last release's web and
workers, which serve on while `migrate` runs and until they restart, insert knowledge bases without it."""

from django.db import migrations, models

UNRECORDED = "unrecorded"  # retrieval.models.REINDEX_FROM_UNRECORDED, as of this migration


def unfinished_reindexes_mark(apps, schema_editor):
    knowledge_base_model = apps.get_model("retrieval", "KnowledgeBase")
    knowledge_base_model.objects.filter(reindex_status__in=["failed", "running"]).update(
        reindex_from_model_identity=UNRECORDED
    )


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0011_document_queue_token"),
    ]

    operations = [
        migrations.AddField(
            model_name="knowledgebase",
            name="reindex_from_model_identity",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.RunPython(unfinished_reindexes_mark, migrations.RunPython.noop, elidable=True),
    ]
