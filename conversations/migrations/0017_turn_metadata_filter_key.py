"""Each turn records the metadata filter it searched under, as a key, so that a stored answer is served only under an
equal filter. A conversation's filter is set when it starts and never changes, so the turns stored before are given
their conversation's key; only conversations with a filter are read."""

from django.db import migrations, models

from retrieval.metadata import metadata_filter_key


def turn_keys_from_conversations(apps, schema_editor):
    Conversation = apps.get_model("conversations", "Conversation")
    Turn = apps.get_model("conversations", "Turn")
    filtered = Conversation._base_manager.exclude(metadata_filter=None).values_list("pk", "metadata_filter")
    for pk, metadata_filter in filtered.iterator(chunk_size=2000):
        key = metadata_filter_key(metadata_filter)
        if key:
            Turn._base_manager.filter(conversation_id=pk).update(metadata_filter_key=key)


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0016_duplicate_model_versions"),
    ]

    operations = [
        migrations.AddField(
            model_name="turn",
            name="metadata_filter_key",
            field=models.CharField(blank=True, db_default="", default="", max_length=64),
        ),
        migrations.RunPython(turn_keys_from_conversations, migrations.RunPython.noop, elidable=True),
    ]
