"""The dashboard's daily figures, rolled up per tenant and day."""

from __future__ import annotations

import logging
from datetime import date, datetime, timedelta

from django.db.models import OuterRef, Subquery
from django.utils import timezone

from conversations.models import (
    DedupDayFigures,
    DedupEvent,
)
from conversations.review.dashboard import MAX_PERIOD_DAYS
from conversations.review.dashboard_selectors import day_figures_compute
from tenants.models import Tenant

logger = logging.getLogger(__name__)

# --- dashboard rollups -------------------------------------------------------------------------------------------

# A day is rolled up once it has been over for this long: a turn whose event was stamped just before midnight may
# still be committing after it.
ROLLUP_SETTLE = timedelta(minutes=10)


def dedup_figures_rollup(*, now: datetime | None = None, max_days: int = 1000) -> int:
    """Write the dashboard's figures (`DedupDayFigures`) of every whole past day, in the site's time zone, of every
    tenant with events, back to the longest period the dashboard shows, where none is written yet (or one of another
    time zone). Newest days first across all tenants (yesterday for every tenant before the day before for any), at
    most `max_days` per run: a long history is finished by the next runs, and the dashboard counts a day without a row
    from its events meanwhile. Idempotent; returns how many days it wrote."""
    now = now or timezone.now()
    time_zone = timezone.get_current_timezone_name()
    last_day = timezone.localtime(now - ROLLUP_SETTLE).date() - timedelta(days=1)
    oldest = last_day - timedelta(days=MAX_PERIOD_DAYS)
    # Crosses tenants on purpose (a maintenance job); each tenant's rows are computed from its own events only.
    # Two queries whatever the number of tenants: each tenant's first event (one index probe per tenant, inside the
    # query) and the days already written in the period.
    first_event = (
        DedupEvent.objects.unscoped().filter(tenant_id=OuterRef("pk")).order_by("created_at").values("created_at")[:1]
    )
    tenants = [
        (tenant, first)
        for tenant, first in (
            (tenant, tenant.first_event_at)
            for tenant in Tenant.objects.annotate(first_event_at=Subquery(first_event)).order_by("pk")
        )
        if first is not None
    ]
    done: set[tuple[int, date]] = set(
        DedupDayFigures.objects.unscoped()
        .filter(day__gte=oldest, day__lte=last_day, time_zone=time_zone)
        .values_list("tenant_id", "day")
    )
    missing: list[tuple[date, Tenant]] = []
    for tenant, first in tenants:
        first_day = max(timezone.localtime(first).date(), oldest)
        missing += [
            (day, tenant)
            for day in (first_day + timedelta(days=offset) for offset in range((last_day - first_day).days + 1))
            if (tenant.pk, day) not in done
        ]
    missing.sort(key=lambda item: (item[0], -item[1].pk), reverse=True)  # newest day first; by tenant within a day
    rows = []
    for day, tenant in missing[:max_days]:
        groups, histogram, events = day_figures_compute(tenant=tenant, day=day)
        rows.append(
            DedupDayFigures(
                tenant=tenant, day=day, time_zone=time_zone, groups=groups, histogram=histogram, events=events
            )
        )
        if len(rows) == 500:
            _day_figures_write(rows)
    _day_figures_write(rows)
    written = min(len(missing), max_days)
    if written:
        logger.info("dashboard rollup: %s tenant-days written", written)
    return written


def _day_figures_write(rows: list[DedupDayFigures]) -> None:
    """Upsert and empty `rows`: a row of another time zone is replaced, and two runs at once write the same figures."""
    DedupDayFigures.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["tenant", "day"],
        update_fields=["time_zone", "groups", "histogram", "events", "computed_at"],
    )
    rows.clear()
