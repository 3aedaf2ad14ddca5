"""Joins the labels branch's migration (DuplicateLabel, written beside main's 0012 to 0013) with the verifiers'."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0012_duplicate_label"),
        ("conversations", "0014_duplicate_model_versions"),
    ]

    operations = []
