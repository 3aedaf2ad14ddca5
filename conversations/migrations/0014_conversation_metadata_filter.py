from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0013_conversation_title_feedback_false_hit"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="metadata_filter",
            field=models.JSONField(blank=True, default=None, null=True),
        ),
    ]
