"""Conversation.transcript_digest: the chat client's transcript after the conversation's last chat-completions turn,
by which a request without `conversation_id` goes on in its conversation (conversations/turn/transcripts.py). A column
with a database default: on PostgreSQL 11+ adding it rewrites no row."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0021_conversation_filter_surrogates"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="transcript_digest",
            field=models.CharField(blank=True, db_default="", default="", max_length=64),
        ),
    ]
