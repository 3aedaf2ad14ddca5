"""The dedup dashboard's reads for one tenant and one period: the events' counts and sums by day, action, shadow and
relaxed (`dashboard_groups`), by action and similarity bin (`dashboard_histogram_groups`), each past day read from its
rollup (`DedupDayFigures`) and the days without one grouped by the database; the reviewed decisions by day, action and
verdict (`dashboard_reviewed`) and per candidate threshold (`dashboard_what_if`); and `dashboard_get`, which hands
them to the pure figures of `conversations.review.dashboard`."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime, time, timedelta

from django.db.models import Count, ExpressionWrapper, F, FloatField, Q, QuerySet, Sum, Value
from django.db.models.functions import Floor, Greatest, Least, TruncDate
from django.utils import timezone

from conversations.models import DedupAction, DedupDayFigures, DedupEvent, ReviewVerdict, SettingsChange
from conversations.review.dashboard import (
    HISTOGRAM_BINS,
    Dashboard,
    EventFacts,
    ModelWhatIf,
    WhatIfCounts,
    WhatIfRow,
    dashboard_compute,
    what_if_candidates,
    what_if_from_counts,
)
from tenants.models import Tenant


def period_bounds(*, start: date, end: date) -> tuple[datetime, datetime]:
    """[start 00:00, end+1 00:00) in the site's time zone: the period includes the whole `end` day."""
    tz = timezone.get_current_timezone()
    return (
        datetime.combine(start, time.min, tzinfo=tz),
        datetime.combine(end + timedelta(days=1), time.min, tzinfo=tz),
    )


def _events_between(*, tenant: Tenant, since: datetime, until: datetime) -> QuerySet[DedupEvent]:
    # order_by(): the model's default ordering would otherwise join the GROUP BY.
    return DedupEvent.objects.for_tenant(tenant).filter(created_at__gte=since, created_at__lt=until).order_by()


def _period_events(*, tenant: Tenant, start: date, end: date) -> QuerySet[DedupEvent]:
    since, until = period_bounds(start=start, end=end)
    return _events_between(tenant=tenant, since=since, until=until)


def _rolled_days(*, tenant: Tenant, start: date, end: date) -> dict[date, DedupDayFigures]:
    """The period's days whose figures the rollup task has written, in the site's current time zone."""
    rows = DedupDayFigures.objects.for_tenant(tenant).filter(
        day__gte=start, day__lte=end, time_zone=timezone.get_current_timezone_name()
    )
    return {row.day: row for row in rows}


def _live_events(*, tenant: Tenant, start: date, end: date, rolled: Iterable[date]) -> QuerySet[DedupEvent] | None:
    """The events of the period's days that have no rollup (today, days not yet rolled up), one time range per
    run of such days; None when every day has one."""
    rolled = set(rolled)
    ranges = Q()
    run_start: date | None = None
    for offset in range((end - start).days + 2):
        day = start + timedelta(days=offset)
        live = day <= end and day not in rolled
        if live and run_start is None:
            run_start = day
        elif not live and run_start is not None:
            since, until = period_bounds(start=run_start, end=day - timedelta(days=1))
            ranges |= Q(created_at__gte=since, created_at__lt=until)
            run_start = None
    if not ranges:
        return None
    return DedupEvent.objects.for_tenant(tenant).filter(ranges).order_by()


def _groups_of(events: QuerySet[DedupEvent]) -> list[EventFacts]:
    """Events counted and summed in the database by local day, action, shadow and relaxed."""
    rows = (
        events.annotate(day=TruncDate("created_at", tzinfo=timezone.get_current_timezone()))
        .values("day", "action", "shadow", "relaxed")
        .annotate(events=Count("id"), excluded=Sum("excluded_count"), tokens=Sum("tokens_saved"), ms=Sum("ms_saved"))
    )
    return [
        EventFacts(
            day=row["day"],
            action=row["action"],
            shadow=row["shadow"],
            relaxed=row["relaxed"],
            count=row["events"],
            excluded_count=row["excluded"] or 0,
            tokens_saved=row["tokens"] or 0,
            ms_saved=row["ms"] or 0.0,
        )
        for row in rows
    ]


def _histogram_of(events: QuerySet[DedupEvent]) -> list[tuple[str, int, int]]:
    """(action, similarity bin, events) for the events that had a nearest match (`similarity_bin`'s rule, in SQL)."""
    scaled = ExpressionWrapper(F("similarity") * HISTOGRAM_BINS + 1e-9, output_field=FloatField())
    rows = (
        # Events without a nearest match stay out (PostgreSQL's GREATEST would also put a NULL in the first bin).
        events.filter(similarity__isnull=False)
        .annotate(bin=Least(Greatest(Floor(scaled), Value(0.0)), Value(HISTOGRAM_BINS - 1.0)))
        .values("action", "bin")
        .annotate(events=Count("id"))
    )
    return [(row["action"], int(row["bin"]), row["events"]) for row in rows]


def dashboard_groups(
    *, tenant: Tenant, start: date, end: date, rolled: dict[date, DedupDayFigures] | None = None
) -> list[EventFacts]:
    """The tenant's events from `start` to `end` (whole days), counted and summed by local day, action, shadow and
    relaxed (reviews are left out: `dashboard_reviewed`): from the day rollups where the task has written them
    (`DedupDayFigures`; `rolled` when the caller has read them already), else by the database from the events."""
    if rolled is None:
        rolled = _rolled_days(tenant=tenant, start=start, end=end)
    facts = [
        EventFacts(
            day=row.day,
            action=action,
            shadow=shadow,
            relaxed=relaxed,
            count=count,
            excluded_count=excluded,
            tokens_saved=tokens,
            ms_saved=ms,
        )
        for row in rolled.values()
        for action, shadow, relaxed, count, excluded, tokens, ms in row.groups
    ]
    live = _live_events(tenant=tenant, start=start, end=end, rolled=rolled)
    return facts + (_groups_of(live) if live is not None else [])


def dashboard_histogram_groups(
    *, tenant: Tenant, start: date, end: date, rolled: dict[date, DedupDayFigures] | None = None
) -> list[EventFacts]:
    """The period's events that had a nearest match, counted by action and similarity bin, from the day rollups
    (`rolled` as for dashboard_groups) and the events of the days without one. `day` is the period's first day."""
    if rolled is None:
        rolled = _rolled_days(tenant=tenant, start=start, end=end)
    counts: dict[tuple[str, int], int] = {}
    for row in rolled.values():
        for action, similarity_bin, count in row.histogram:
            counts[(action, similarity_bin)] = counts.get((action, similarity_bin), 0) + count
    live = _live_events(tenant=tenant, start=start, end=end, rolled=rolled)
    for action, similarity_bin, count in _histogram_of(live) if live is not None else ():
        counts[(action, similarity_bin)] = counts.get((action, similarity_bin), 0) + count
    return [
        EventFacts(day=start, action=action, count=count, similarity_bin=similarity_bin)
        for (action, similarity_bin), count in counts.items()
    ]


def _reviewed_events(*, tenant: Tenant, start: date, end: date) -> QuerySet[DedupEvent]:
    # Read through the partial index of reviewed events: a few in a great many.
    return _period_events(tenant=tenant, start=start, end=end).exclude(review_verdict=ReviewVerdict.UNREVIEWED)


def dashboard_reviewed(*, tenant: Tenant, start: date, end: date) -> list[EventFacts]:
    """The period's reviewed decisions counted by local day, action and verdict: the review figures (reviewed hits,
    false hits) per day and in total. Never rolled up, as a verdict can change: a review counts at once."""
    rows = (
        _reviewed_events(tenant=tenant, start=start, end=end)
        .annotate(day=TruncDate("created_at", tzinfo=timezone.get_current_timezone()))
        .values("day", "action", "review_verdict")
        .annotate(events=Count("id"))
    )
    return [
        EventFacts(day=row["day"], action=row["action"], review_verdict=row["review_verdict"], count=row["events"])
        for row in rows
    ]


def dashboard_what_if(
    *, tenant: Tenant, start: date, end: date, current: float | None, lowest: float | None = None
) -> tuple[list[WhatIfRow], int]:
    """The what-if table counted by the database: per action and verdict of the reviewed decisions taken on
    similarity, how many each candidate threshold (none below `lowest`) would have served (`repeat_label` and
    `what_if_compute`'s rule: similarity >= threshold - 1e-9, and a match not refused by the other checks)."""
    candidates = what_if_candidates(current=current, lowest=lowest)
    served_at = {
        f"hits_{index}": Count("id", filter=Q(similarity__gte=threshold - 1e-9) & ~Q(match_passes_checks=False))
        for index, threshold in enumerate(candidates)
    }
    rows = (
        _reviewed_events(tenant=tenant, start=start, end=end)
        .filter(similarity__isnull=False, action__in=[DedupAction.SERVED_CACHED, DedupAction.ANSWERED])
        .values("action", "review_verdict")
        .annotate(total=Count("id"), **served_at)
    )
    counts = [
        WhatIfCounts(
            action=row["action"],
            review_verdict=row["review_verdict"],
            total=row["total"],
            hits=tuple(row[f"hits_{index}"] for index in range(len(candidates))),
        )
        for row in rows
    ]
    return what_if_from_counts(counts, candidates=candidates, current=current)


def dashboard_what_if_models(
    *, tenant: Tenant, start: date, end: date, current: float | None, lowest: float | None = None
) -> list[ModelWhatIf]:
    """The what-if table as each verifier that ran in shadow in the period would have decided the reviewed decisions
    it ran beside: the same rule, with its own verdict on the other checks (`shadow_verifier_passes_checks`)."""
    candidates = what_if_candidates(current=current, lowest=lowest)
    served_at = {
        f"hits_{index}": Count(
            "id", filter=Q(similarity__gte=threshold - 1e-9) & ~Q(shadow_verifier_passes_checks=False)
        )
        for index, threshold in enumerate(candidates)
    }
    rows = (
        _reviewed_events(tenant=tenant, start=start, end=end)
        .filter(
            similarity__isnull=False,
            shadow_verifier__isnull=False,
            action__in=[DedupAction.SERVED_CACHED, DedupAction.ANSWERED],
        )
        .values("shadow_verifier", "shadow_verifier__version", "action", "review_verdict")
        .annotate(total=Count("id"), **served_at)
        .order_by("shadow_verifier__version")
    )
    by_model: dict[int, list[WhatIfCounts]] = {}
    for row in rows:
        by_model.setdefault(row["shadow_verifier__version"], []).append(
            WhatIfCounts(
                action=row["action"],
                review_verdict=row["review_verdict"],
                total=row["total"],
                hits=tuple(row[f"hits_{index}"] for index in range(len(candidates))),
            )
        )
    models = []
    for version, counts in sorted(by_model.items()):
        table, sample = what_if_from_counts(counts, candidates=candidates, current=current)
        models.append(ModelWhatIf(label=f"v{version} (shadow)", rows=table, sample=sample))
    return models


def day_figures_compute(*, tenant: Tenant, day: date) -> tuple[list[list], list[list], int]:
    """What a `DedupDayFigures` row holds for one whole local day: (groups, histogram, events)."""
    since, until = period_bounds(start=day, end=day)
    events = _events_between(tenant=tenant, since=since, until=until)
    groups = [
        [g.action, g.shadow, g.relaxed, g.count, g.excluded_count, g.tokens_saved, g.ms_saved]
        for g in _groups_of(events)
    ]
    histogram = [list(row) for row in _histogram_of(events)]
    return groups, histogram, sum(g[3] for g in groups)


def settings_changes_in_period(*, tenant: Tenant, start: date, end: date, limit: int = 20) -> list[SettingsChange]:
    """The tenant's policy changes in the period, newest first, so a jump in a chart can be read against the
    change that caused it."""
    since, until = period_bounds(start=start, end=end)
    return list(
        SettingsChange.objects.for_tenant(tenant).filter(subject="policy", changed_at__gte=since, changed_at__lt=until)[
            :limit
        ]
    )


def dashboard_get(
    *, tenant: Tenant, start: date, end: date, threshold: float, lowest_threshold: float | None = None
) -> Dashboard:
    """The dashboard of one tenant and period, at the gate the decisions apply (`threshold`), with no what-if row
    below `lowest_threshold` (the lowest gate they can apply)."""
    rolled = _rolled_days(tenant=tenant, start=start, end=end)  # read once, for the groups and the histogram
    return dashboard_compute(
        dashboard_groups(tenant=tenant, start=start, end=end, rolled=rolled),
        start=start,
        end=end,
        threshold=threshold,
        histogram_events=dashboard_histogram_groups(tenant=tenant, start=start, end=end, rolled=rolled),
        reviewed=dashboard_reviewed(tenant=tenant, start=start, end=end),
        what_if=dashboard_what_if(tenant=tenant, start=start, end=end, current=threshold, lowest=lowest_threshold),
        lowest_threshold=lowest_threshold,
        what_if_models=dashboard_what_if_models(
            tenant=tenant, start=start, end=end, current=threshold, lowest=lowest_threshold
        ),
    )
