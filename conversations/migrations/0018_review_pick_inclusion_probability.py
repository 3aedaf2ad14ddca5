from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0017_turn_metadata_filter_key"),
    ]

    operations = [
        migrations.AddField(
            model_name="reviewpick",
            name="inclusion_probability",
            field=models.FloatField(blank=True, null=True),
        ),
    ]
