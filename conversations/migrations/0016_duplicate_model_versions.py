import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('conversations', '0015_review_pick'),
        ('conversations', '0015_answer_state_rewrite_followups'),
        ('tenants', '0002_tenant_settings_version'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='dedupevent',
            name='shadow_verifier_hit',
            field=models.BooleanField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='dedupevent',
            name='shadow_verifier_passes_checks',
            field=models.BooleanField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='dedupevent',
            name='shadow_verifier_probability',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='dedupevent',
            name='verifier_label',
            field=models.CharField(blank=True, default='', max_length=40),
        ),
        migrations.AddField(
            model_name='deduppolicy',
            name='precision_target',
            field=models.FloatField(default=0.9, help_text='Precision a verifier trained from reviews is cut for, and must reach on held-out labels to become active (0.5 to 0.999).', validators=[django.core.validators.MinValueValidator(0.5), django.core.validators.MaxValueValidator(0.999)]),
        ),
        migrations.CreateModel(
            name='DuplicateModelVersion',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('version', models.PositiveIntegerField()),
                ('status', models.CharField(choices=[('queued', 'Queued'), ('training', 'Training'), ('candidate', 'Candidate (trained, not active)'), ('shadow', 'Shadow (decides beside the active one, never applied)'), ('active', "Active (decides the tenant's turns)"), ('retired', 'Retired (was active)'), ('failed', 'Failed')], default='queued', max_length=10)),
                ('progress', models.FloatField(default=0.0, help_text='0 to 1, while training.')),
                ('stage', models.CharField(blank=True, default='', max_length=80)),
                ('source', models.CharField(default='reviews', max_length=255)),
                ('label_count', models.PositiveIntegerField(default=0)),
                ('training_set_sha256', models.CharField(blank=True, default='', max_length=64)),
                ('figures', models.JSONField(blank=True, default=dict)),
                ('decision_note', models.CharField(blank=True, default='', max_length=300)),
                ('error', models.TextField(blank=True, default='')),
                ('started_by_label', models.CharField(blank=True, default='', max_length=255)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('activated_at', models.DateTimeField(blank=True, null=True)),
                ('started_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant')),
            ],
            options={
                'ordering': ['-version'],
            },
        ),
        migrations.AddField(
            model_name='dedupevent',
            name='shadow_verifier',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='conversations.duplicatemodelversion'),
        ),
        migrations.AddField(
            model_name='dedupevent',
            name='verifier',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='conversations.duplicatemodelversion'),
        ),
        migrations.AddConstraint(
            model_name='duplicatemodelversion',
            constraint=models.UniqueConstraint(fields=('tenant', 'version'), name='duplicate_model_unique_version'),
        ),
        migrations.AddConstraint(
            model_name='duplicatemodelversion',
            constraint=models.UniqueConstraint(condition=models.Q(('status', 'active')), fields=('tenant',), name='duplicate_model_one_active'),
        ),
        migrations.AddConstraint(
            model_name='duplicatemodelversion',
            constraint=models.UniqueConstraint(condition=models.Q(('status', 'shadow')), fields=('tenant',), name='duplicate_model_one_shadow'),
        ),
    ]
