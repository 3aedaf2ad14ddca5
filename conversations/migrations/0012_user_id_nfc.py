"""End-user ids in one spelling (Unicode NFC), as conversation_create now stores them: ids stored before in another
normal form are rewritten, on conversations and on the turns that copy them, so one user's earlier conversations
stay theirs. Only ids with a character outside ASCII can change, so only those rows are read."""

import unicodedata

from django.db import migrations

NON_ASCII = r"[^\x00-\x7f]"


def user_ids_to_nfc(apps, schema_editor):
    for model_name in ("Conversation", "Turn"):
        model = apps.get_model("conversations", model_name)
        rows = model._base_manager.filter(user_id__regex=NON_ASCII).values_list("pk", "user_id")
        for pk, user_id in rows.iterator(chunk_size=2000):
            canonical = unicodedata.normalize("NFC", user_id)[:255]
            if canonical != user_id:
                model._base_manager.filter(pk=pk).update(user_id=canonical)


class Migration(migrations.Migration):
    dependencies = [("conversations", "0011_turn_partial_index")]

    operations = [migrations.RunPython(user_ids_to_nfc, migrations.RunPython.noop, elidable=True)]
