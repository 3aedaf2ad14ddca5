import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('conversations', '0013_conversation_title_feedback_false_hit'),
        ('tenants', '0002_tenant_settings_version'),
    ]

    operations = [
        migrations.CreateModel(
            name='DuplicateLabel',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('question', models.TextField(help_text='The new question the decision was about.')),
                ('stored_question', models.TextField(help_text='The stored question it was compared with.')),
                ('is_duplicate', models.BooleanField()),
                ('source', models.CharField(choices=[('support', "Support's verdict"), ('end_user', "End user's thumbs-down (suspected until support confirms)"), ('import', 'Imported')], max_length=8)),
                ('given_by', models.CharField(blank=True, default='', max_length=255)),
                ('note', models.TextField(blank=True, default='')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('dedup_event', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='duplicate_labels', to='conversations.dedupevent')),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant')),
            ],
            options={
                'ordering': ['id'],
                'indexes': [models.Index(fields=['tenant', 'source'], name='duplicate_label_tenant_source')],
                'constraints': [models.UniqueConstraint(condition=models.Q(('dedup_event__isnull', False)), fields=('dedup_event', 'source'), name='duplicate_label_one_per_event_source')],
            },
        ),
    ]
