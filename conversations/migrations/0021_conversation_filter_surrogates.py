"""Conversations saved on SQLite with a lone UTF-16 surrogate in their metadata filter become readable again.

Before the filter checks refused it, a filter sent as JSON text in a form field could hold half a surrogate pair.
SQLite stored it (as a JSON escape; PostgreSQL's jsonb never could), and every later list of the tenant's conversations,
and the conversation itself, failed to render as UTF-8. Each lone surrogate, in a key or a value, becomes U+FFFD, as
`kbplatform.text.text_storable` cleans text nobody can be asked to fix. The filter keeps what it restricts: no stored
metadata holds a lone surrogate, and a value cleaned this way matches what it matched before, nothing. It is never
dropped, since that would widen what the conversation may read. Runs on SQLite only: no other backend can hold such a
row.
"""

import re

from django.db import migrations

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _cleaned(value):
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_cleaned(item) for item in value]
    if isinstance(value, dict):
        return {_cleaned(key): _cleaned(item) for key, item in value.items()}
    return value


def filters_cleaned(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "sqlite":
        return
    conversations = apps.get_model("conversations", "Conversation")
    rows = conversations.objects.filter(metadata_filter__isnull=False).only("pk", "metadata_filter")
    for row in rows.iterator():
        cleaned = _cleaned(row.metadata_filter)
        if cleaned != row.metadata_filter:
            conversations.objects.filter(pk=row.pk).update(metadata_filter=cleaned)


class Migration(migrations.Migration):
    dependencies = [("conversations", "0020_verifier_per_embedding_model")]

    operations = [migrations.RunPython(filters_cleaned, migrations.RunPython.noop, elidable=True)]
