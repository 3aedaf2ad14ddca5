from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('retrieval', '0012_knowledge_base_reindex_from_model'),
    ]

    operations = [
        migrations.CreateModel(
            name='IngestQueueMarker',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('sent_at', models.DateTimeField(blank=True, null=True)),
                ('seen_at_sent', models.DateTimeField(blank=True, null=True)),
            ],
        ),
    ]
