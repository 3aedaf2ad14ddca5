"""Turn.answer_origin: the QA pair whose answer a served turn gave, so serving a served turn again gives that pair's
current answer. Turns served before it are backfilled from matched_turn (the pair they were served from), then a
copy of a copy is pointed at the first answer, one level per statement until none is left (chains are short)."""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import F, OuterRef, Subquery

MAX_LEVELS = 100


def origins_backfill(apps, schema_editor):
    turn_model = apps.get_model("conversations", "Turn")
    turn_model.objects.filter(decision="served_cached", matched_turn__isnull=False).update(
        answer_origin=F("matched_turn")
    )
    origin_of_origin = Subquery(turn_model.objects.filter(pk=OuterRef("answer_origin")).values("answer_origin")[:1])
    for _ in range(MAX_LEVELS):
        if not turn_model.objects.filter(answer_origin__answer_origin__isnull=False).update(
            answer_origin=origin_of_origin
        ):
            break
    if schema_editor.connection.vendor == "postgresql":
        # The updates queued foreign-key checks; PostgreSQL refuses the index AddField creates at the end of this
        # migration while any are pending, so run them now.
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0007_dedup_event_pair_checks"),
    ]

    operations = [
        migrations.AddField(
            model_name="turn",
            name="answer_origin",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="conversations.turn",
            ),
        ),
        migrations.RunPython(origins_backfill, migrations.RunPython.noop),
    ]
