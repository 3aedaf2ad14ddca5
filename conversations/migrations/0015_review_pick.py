import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('conversations', '0014_duplicate_label'),
        ('tenants', '0002_tenant_settings_version'),
    ]

    operations = [
        migrations.CreateModel(
            name='ReviewPick',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('day', models.DateField()),
                ('reason', models.CharField(max_length=16)),
                ('rank', models.PositiveIntegerField()),
                ('picked_at', models.DateTimeField(auto_now_add=True)),
                ('dedup_event', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='review_picks', to='conversations.dedupevent')),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant')),
            ],
            options={
                'ordering': ['day', 'rank'],
                'indexes': [models.Index(fields=['tenant', 'day', 'rank'], name='review_pick_tenant_day')],
                'constraints': [models.UniqueConstraint(fields=('tenant', 'dedup_event'), name='review_pick_once_per_event')],
            },
        ),
    ]
