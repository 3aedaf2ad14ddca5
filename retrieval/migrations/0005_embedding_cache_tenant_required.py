"""Step 2 of 2 (see 0004): every entry has its tenant; make it required and unique per tenant, model and text."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0004_embedding_cache_per_tenant"),
    ]

    operations = [
        migrations.AlterField(
            model_name="embeddingcacheentry",
            name="tenant",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="tenants.tenant"
            ),
        ),
        migrations.AddConstraint(
            model_name="embeddingcacheentry",
            constraint=models.UniqueConstraint(
                fields=("tenant", "model_name", "text_hash"), name="embedding_cache_unique_tenant_model_text"
            ),
        ),
    ]
