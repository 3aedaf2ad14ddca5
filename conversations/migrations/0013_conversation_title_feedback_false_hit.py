"""A conversation's client-given title, the end users' feedback on answers, and the audit event's suspected false hit
(a thumbs-down on a served stored answer) with a partial index for the review queue built on it.

The new columns keep their defaults in the database (`db_default`), not only in Django: the last release's web and
workers, which serve on while `migrate` runs and until they restart, insert conversations and audit events without
them."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("conversations", "0012_user_id_nfc"),
        ('tenants', '0002_tenant_settings_version'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Feedback',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('rating', models.CharField(choices=[('up', 'Thumbs up'), ('down', 'Thumbs down')], max_length=4)),
                ('comment', models.TextField(blank=True, default='')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'verbose_name_plural': 'feedback',
                'ordering': ['-updated_at', '-id'],
            },
        ),
        migrations.AddField(
            model_name='conversation',
            name='title',
            field=models.CharField(blank=True, db_default='', default='', max_length=200),
        ),
        migrations.AddField(
            model_name='dedupevent',
            name='suspected_false_hit',
            field=models.BooleanField(db_default=False, default=False, help_text='The end user rated the stored answer this turn served thumbs-down: support should review it.'),
        ),
        migrations.AddField(
            model_name='dedupevent',
            name='suspected_false_hit_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name='dedupevent',
            index=models.Index(condition=models.Q(('suspected_false_hit', True)), fields=['tenant', 'suspected_false_hit_at'], name='dedupevent_tenant_suspected'),
        ),
        migrations.AddField(
            model_name='feedback',
            name='conversation',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='feedback', to='conversations.conversation'),
        ),
        migrations.AddField(
            model_name='feedback',
            name='tenant',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant'),
        ),
        migrations.AddField(
            model_name='feedback',
            name='turn',
            field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='feedback', to='conversations.turn'),
        ),
        migrations.AddIndex(
            model_name='feedback',
            index=models.Index(fields=['tenant', 'updated_at'], name='feedback_tenant_updated'),
        ),
        migrations.AddIndex(
            model_name='feedback',
            index=models.Index(fields=['tenant', 'rating', 'updated_at'], name='feedback_tenant_rating'),
        ),
    ]
