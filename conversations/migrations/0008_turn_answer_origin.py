"""Turn.answer_origin: the QA pair whose answer a served turn gave, so serving a served turn again gives that pair's
current answer. Turns served before it are backfilled from matched_turn (the pair they were served from), following
a copy of a copy to the first answer: in primary-key order, the pair a copy was served from is always done first."""

from collections import defaultdict

import django.db.models.deletion
from django.db import migrations, models

BATCH = 1000


def origins_backfill(apps, schema_editor):
    turn_model = apps.get_model("conversations", "Turn")
    served = turn_model.objects.filter(decision="served_cached", matched_turn__isnull=False)
    last = 0
    while True:
        rows = list(served.filter(pk__gt=last).order_by("pk").values_list("pk", "matched_turn_id")[:BATCH])
        if not rows:
            return
        last = rows[-1][0]
        origin_of = dict(
            turn_model.objects.filter(pk__in={matched for _, matched in rows}, answer_origin__isnull=False).values_list(
                "pk", "answer_origin_id"
            )
        )
        by_origin = defaultdict(list)
        for pk, matched in rows:
            origin_of[pk] = origin_of.get(matched, matched)
            by_origin[origin_of[pk]].append(pk)
        for origin, pks in by_origin.items():
            turn_model.objects.filter(pk__in=pks).update(answer_origin_id=origin)


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
