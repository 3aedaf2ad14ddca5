"""Cost of the dedup dashboard's figures for one tenant and period as the period's event count grows: the shipped
path (`conversations.review.dashboard_selectors.dashboard_get` once the rollup task has written the period's days: one
row per day, and the reviewed decisions counted by the database for the review figures and the what-if table) against
two baselines run in the same process on the same rows: the first path, which read every event of the period into
Python and computed the figures there (`dashboard_compute` over one `EventFacts` per event), and the grouped path
without rollups (the database counts and sums the events by day, action, flags and similarity bin; what the
dashboard still does for today and for days not rolled up yet). It also prints what writing the period's rollups
took. All three must give the same figures, or the script stops.

The events are synthetic (actions, flags, similarities and reviews drawn at random, 1 in 20 reviewed), spread over a
30-day period, bulk-inserted for one tenant and deleted afterwards. Set DATABASE_URL for PostgreSQL (what production
runs); the default is the SQLite file under var/.

Usage: .venv/bin/python bench/dashboard_figures.py [--sizes 10000,100000,500000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import uuid
from datetime import date, datetime, timedelta
from datetime import time as day_time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")

import django  # noqa: E402

django.setup()

sys.path.insert(0, str(ROOT / "bench"))
from common import planner_statistics_refresh  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from conversations.models import DedupDayFigures, DedupEvent  # noqa: E402
from conversations.review.dashboard import EventFacts, dashboard_compute  # noqa: E402
from conversations.review.dashboard_selectors import (  # noqa: E402
    dashboard_get,
    dashboard_groups,
    dashboard_histogram_groups,
    dashboard_reviewed,
    period_bounds,
)
from conversations.services import dedup_figures_rollup  # noqa: E402
from lifecycle.services import tenant_get_or_create  # noqa: E402

ACTIONS = ("answered", "served_cached", "bypassed", "smalltalk")
# One decision in 20 reviewed: support reviews a sample (the what-if table reads reviewed decisions one by one).
VERDICTS = ("unreviewed",) * 38 + ("correct", "incorrect")
START = date(2026, 1, 1)


def events_insert(tenant, count: int, *, days: int, seed: int = 1) -> None:  # noqa: ANN001
    rng = random.Random(seed)
    base = datetime.combine(START, day_time.min, tzinfo=timezone.get_current_timezone())
    batch = []
    for index in range(count):
        similarity = rng.random() if rng.random() > 0.1 else None
        batch.append(
            DedupEvent(
                tenant=tenant,
                conversation_ref=index,
                action=rng.choice(ACTIONS),
                similarity=similarity,
                match_passes_checks=None if similarity is None else rng.random() > 0.3,
                scope="session",
                threshold=0.76,
                question_window=10,
                exclusion_window=5,
                granularity="chunk",
                shadow=rng.random() < 0.05,
                relaxed=rng.random() < 0.08,
                excluded_count=rng.randrange(5),
                tokens_saved=rng.randrange(1000),
                ms_saved=rng.random() * 3000,
                review_verdict=rng.choice(VERDICTS),
            )
        )
        if len(batch) == 5000:
            _flush(batch, base, days, rng)
    _flush(batch, base, days, rng)


def _flush(batch: list, base: datetime, days: int, rng: random.Random) -> None:
    created = DedupEvent.objects.bulk_create(batch)
    # created_at is auto_now_add: spread the events over the period afterwards, in one statement per day.
    by_day: dict[int, list[int]] = {}
    for event in created:
        by_day.setdefault(rng.randrange(days), []).append(event.pk)
    for offset, ids in by_day.items():
        moment = base + timedelta(days=offset, seconds=rng.randrange(86400))
        DedupEvent.objects.unscoped().filter(pk__in=ids).update(created_at=moment)
    batch.clear()


def previous_path(tenant, *, start: date, end: date, threshold: float):  # noqa: ANN001, ANN201
    """Every event of the period read into Python, then the figures (the path before the grouped selector)."""
    since, until = period_bounds(start=start, end=end)
    fields = ("action", "similarity", "shadow", "relaxed", "excluded_count", "tokens_saved", "ms_saved")
    rows = (
        DedupEvent.objects.for_tenant(tenant)
        .filter(created_at__gte=since, created_at__lt=until)
        .values_list("created_at", *fields, "review_verdict", "match_passes_checks")
        .iterator(chunk_size=2000)
    )
    events = [
        EventFacts(
            day=timezone.localtime(row[0]).date(),
            **dict(zip(fields, row[1:8], strict=True)),
            review_verdict=row[8],
            match_passes_checks=row[9],
        )
        for row in rows
    ]
    return dashboard_compute(events, start=start, end=end, threshold=threshold)


def best_of(repeat: int, work) -> tuple[float, object]:  # noqa: ANN001
    timings, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = work()
        timings.append(time.perf_counter() - started)
    return min(timings), result


def same_figures(first, second) -> bool:  # noqa: ANN001
    def plain(dashboard):  # noqa: ANN001, ANN202
        totals = [(d.day, {**d.totals.__dict__, "ms_saved": round(d.totals.ms_saved, 3)}) for d in dashboard.days]
        return totals, dashboard.histogram, dashboard.what_if, dashboard.what_if_sample

    return plain(first) == plain(second)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,500000")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    print(f"database: {connection.vendor}; {args.days}-day period; best of {args.repeat}")
    print(
        f"{'events':>8} {'every event (baseline) ms':>26} {'grouped ms':>11} {'ratio':>6} {'rollup (now) ms':>16} "
        f"{'ratio':>6} {'rolling up ms':>14} {'rows read now':>14}"
    )
    start, end = START, START + timedelta(days=args.days - 1)
    for size in (int(s) for s in args.sizes.split(",")):
        tenant, _ = tenant_get_or_create(slug=f"bench-dash-{uuid.uuid4().hex[:8]}", name="Dashboard benchmark")
        try:
            events_insert(tenant, size, days=args.days)
            planner_statistics_refresh()
            baseline, expected = best_of(
                args.repeat, lambda tenant=tenant: previous_path(tenant, start=start, end=end, threshold=0.76)
            )
            grouped_time, grouped = best_of(
                args.repeat, lambda tenant=tenant: dashboard_get(tenant=tenant, start=start, end=end, threshold=0.76)
            )
            # The rollup task as beat runs it, the day after the period (it writes every day of the period).
            started = time.perf_counter()
            dedup_figures_rollup(
                now=datetime.combine(end + timedelta(days=1), day_time(1), tzinfo=timezone.get_current_timezone())
            )
            rolling = time.perf_counter() - started
            now, rolled = best_of(
                args.repeat, lambda tenant=tenant: dashboard_get(tenant=tenant, start=start, end=end, threshold=0.76)
            )
            for label, figures in (("grouped", grouped), ("rolled-up", rolled)):
                if not same_figures(expected, figures):
                    raise SystemExit(f"{size} events: the {label} figures differ from the per-event ones")
            rows = sum(
                len(select(tenant=tenant, start=start, end=end))
                for select in (dashboard_groups, dashboard_histogram_groups, dashboard_reviewed)
            )
            print(
                f"{size:>8} {baseline * 1000:>26.1f} {grouped_time * 1000:>11.1f} {grouped_time / baseline:>6.2f} "
                f"{now * 1000:>16.1f} {now / baseline:>6.2f} {rolling * 1000:>14.1f} {rows:>14,}"
            )
        finally:
            DedupEvent.objects.for_tenant(tenant).delete()
            DedupDayFigures.objects.for_tenant(tenant).delete()
            tenant.delete()


if __name__ == "__main__":
    main()
