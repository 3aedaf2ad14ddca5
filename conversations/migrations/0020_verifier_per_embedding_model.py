"""Each embedding model of a tenant gets its own active and shadow verifier, and each audit event names the model its
question was decided with (so a label trains that model's verifier only).

Existing versions take the model their file names (its `embedding_model`); a version whose file is gone or names none
was trained before a knowledge base could choose its model, on the primary model of the deployment. Run where
KB_DUPLICATE_MODEL_DIR is mounted: a file it cannot read names its version the primary model, and a version trained on
another model then never decides (its file's model is checked at every turn, `decisions.verifier_reads`). Existing events
take their conversation's knowledge base's model when the conversation is still there, else stay unnamed (their labels
then train every model's verifier, as all labels did before).
"""

import json
from pathlib import Path

from django.conf import settings
from django.db import migrations, models

# The bundled model's name: the primary model of a deployment without EMBEDDING_MODEL_PATH.
BUNDLED_MODEL_NAME = "all-MiniLM-L6-v2"


def _primary_model_name() -> str:
    return Path(settings.EMBEDDING_MODEL_PATH).name if settings.EMBEDDING_MODEL_PATH else BUNDLED_MODEL_NAME


def _version_model(tenant_id: int, version: int) -> str:
    path = Path(settings.DUPLICATE_MODEL_DIR) / f"tenant-{int(tenant_id)}" / f"v{int(version)}.json"
    try:
        named = json.loads(path.read_text(encoding="utf-8")).get("embedding_model")
    except (OSError, ValueError, AttributeError):
        named = None
    return named if isinstance(named, str) and named else _primary_model_name()


def models_named(apps, schema_editor) -> None:
    versions = apps.get_model("conversations", "DuplicateModelVersion")
    for row in versions.objects.only("pk", "tenant_id", "version").iterator():
        versions.objects.filter(pk=row.pk).update(embedding_model=_version_model(row.tenant_id, row.version))
    events = apps.get_model("conversations", "DedupEvent")
    knowledge_bases = apps.get_model("retrieval", "KnowledgeBase")
    for knowledge_base_id, model in knowledge_bases.objects.values_list("pk", "embedding_model").iterator():
        events.objects.filter(conversation__knowledge_base_id=knowledge_base_id).update(embedding_model=model)

class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0019_curated_answers"),
        ("retrieval", "0017_knowledge_base_text_index_lease"),
    ]

    operations = [
        migrations.AddField(
            model_name="dedupevent",
            name="embedding_model",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AddField(
            model_name="duplicatemodelversion",
            name="embedding_model",
            field=models.CharField(default="", max_length=200),
            preserve_default=False,
        ),
        migrations.RunPython(models_named, migrations.RunPython.noop),
        migrations.RemoveConstraint(model_name="duplicatemodelversion", name="duplicate_model_one_active"),
        migrations.RemoveConstraint(model_name="duplicatemodelversion", name="duplicate_model_one_shadow"),
        migrations.AddConstraint(
            model_name="duplicatemodelversion",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status", "active")),
                fields=("tenant", "embedding_model"),
                name="duplicate_model_one_active_per_model",
            ),
        ),
        migrations.AddConstraint(
            model_name="duplicatemodelversion",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status", "shadow")),
                fields=("tenant", "embedding_model"),
                name="duplicate_model_one_shadow_per_model",
            ),
        ),
        migrations.AlterField(
            model_name="duplicatemodelversion",
            name="status",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("training", "Training"),
                    ("candidate", "Candidate (trained, not active)"),
                    ("shadow", "Shadow (decides beside the active one, never applied)"),
                    ("active", "Active (decides the turns of its model's knowledge bases)"),
                    ("retired", "Retired (was active)"),
                    ("failed", "Failed"),
                ],
                default="queued",
                max_length=10,
            ),
        ),
    ]
