"""The dashboard's figures and the threshold what-if table, against events with known values."""

from datetime import date

import pytest

from conversations.models import DedupAction, ReviewVerdict
from conversations.review.dashboard import (
    EventFacts,
    days_compute,
    duration_display,
    histogram_compute,
    histogram_first_shown,
    percent_display,
    repeat_label,
    similarity_bin,
    threshold_display,
    totals_compute,
    what_if_candidates,
    what_if_compute,
)

DAY1 = date(2026, 3, 1)
DAY2 = date(2026, 3, 2)
SERVED = DedupAction.SERVED_CACHED
ANSWERED = DedupAction.ANSWERED
CORRECT = ReviewVerdict.CORRECT
INCORRECT = ReviewVerdict.INCORRECT


def _event(**fields) -> EventFacts:
    fields.setdefault("day", DAY1)
    fields.setdefault("action", ANSWERED)
    return EventFacts(**fields)


EVENTS = [
    # two applied hits, one reviewed correct, one reviewed as a false hit
    _event(action=SERVED, similarity=0.95, tokens_saved=300, ms_saved=1200.0, review_verdict=CORRECT),
    _event(action=SERVED, similarity=0.91, tokens_saved=200, ms_saved=800.0, review_verdict=INCORRECT, day=DAY2),
    # a shadow-mode hit: counted apart, saves nothing, still judged as a hit decision
    _event(action=SERVED, similarity=0.93, shadow=True, tokens_saved=999, ms_saved=999.0, review_verdict=CORRECT),
    # misses: one reviewed correct (not a repeat), one reviewed incorrect (a missed repeat), one unreviewed
    _event(similarity=0.85, excluded_count=3, review_verdict=CORRECT),
    _event(similarity=0.88, excluded_count=2, relaxed=True, review_verdict=INCORRECT, day=DAY2),
    _event(similarity=0.40, excluded_count=1),
    # no nearest match, and small talk
    _event(similarity=None),
    _event(action=DedupAction.SMALLTALK, similarity=None, day=DAY2),
    # a bypass decided by a rule, not by similarity: reviewed but left out of the what-if
    _event(action=DedupAction.BYPASSED, similarity=0.97, review_verdict=INCORRECT, day=DAY2),
]


def test_totals():
    totals = totals_compute(EVENTS)
    assert totals.turns == 9
    assert totals.hits == 2
    assert totals.shadow_hits == 1
    assert totals.hit_rate == pytest.approx(2 / 9)
    assert totals.tokens_saved == 500
    assert totals.ms_saved == pytest.approx(2000.0)
    assert totals.passages_avoided == 4  # 3 + 1; the 2 of the relaxed turn were shown after all
    assert totals.relaxed == 1
    # reviewed served_cached decisions: 0.95 correct, 0.91 incorrect, shadow 0.93 correct
    assert totals.reviewed_hits == 3
    assert totals.false_hits == 1
    assert totals.false_hit_rate == pytest.approx(1 / 3)


def test_passages_avoided_only_when_the_exclusion_was_applied():
    events = [
        _event(excluded_count=4),
        _event(excluded_count=3, relaxed=True),  # relaxed: the search ran without the exclusion
        _event(excluded_count=5, shadow=True),  # shadow mode: exclusion decided and logged, not applied
    ]
    assert totals_compute(events).passages_avoided == 4
    assert totals_compute(events).relaxed == 1


def test_totals_of_nothing_have_no_rates():
    totals = totals_compute([])
    assert totals.turns == 0 and totals.hit_rate is None and totals.false_hit_rate is None


def test_days_are_continuous_and_split_by_day():
    days = days_compute(EVENTS, start=date(2026, 2, 28), end=date(2026, 3, 3))
    assert [d.day for d in days] == [date(2026, 2, 28), DAY1, DAY2, date(2026, 3, 3)]
    assert [d.totals.turns for d in days] == [0, 5, 4, 0]
    assert [d.totals.hits for d in days] == [0, 1, 1, 0]
    assert [d.totals.tokens_saved for d in days] == [0, 300, 200, 0]
    assert days[1].totals.false_hit_rate == 0.0  # day 1: reviewed hits 0.95 (correct) and shadow 0.93 (correct)
    assert days[2].totals.false_hit_rate == 1.0
    assert days[2].totals.relaxed == 1


def test_days_ignore_events_outside_the_period():
    days = days_compute(EVENTS, start=DAY2, end=DAY2)
    assert len(days) == 1 and days[0].totals.turns == 4


@pytest.mark.parametrize(
    ("similarity", "expected"),
    [(0.0, 0), (-0.3, 0), (0.024, 0), (0.025, 1), (0.9, 36), (0.8999999999999, 36), (0.924, 36), (1.0, 39)],
)
def test_similarity_bin(similarity, expected):
    assert similarity_bin(similarity, 40) == expected


def test_histogram_splits_hits_and_misses():
    bins = histogram_compute(EVENTS, bins=20)  # width 0.05
    assert len(bins) == 20 and bins[0].low == 0.0 and bins[-1].high == 1.0
    by_low = {b.low: (b.hits, b.misses) for b in bins}
    assert by_low[0.95] == (1, 1)  # 0.95 served, 0.97 bypassed (a miss)
    assert by_low[0.9] == (2, 0)  # 0.91 and the shadow 0.93
    assert by_low[0.85] == (0, 2)  # 0.85, 0.88
    assert by_low[0.4] == (0, 1)
    assert sum(b.hits + b.misses for b in bins) == 7  # the two events without a similarity are left out


@pytest.mark.parametrize(
    ("similarities", "threshold", "first_low"),
    [
        ([0.62, 0.93], 0.9, 0.5),  # nothing below 0.5: the chart starts there
        ([0.31, 0.93], 0.9, 0.3),  # a similarity below: from its bin
        ([0.62, 0.93], 0.3, 0.3),  # a threshold below the bins shown: from its bin, so its line is on the chart
        ([0.62, 0.93], 0.01, 0.0),
        ([0.62, 0.93], 0.99, 0.5),
        ([0.62, 0.93], 1.0, 0.5),
        ([], 0.3, 0.3),
    ],
)
def test_the_similarity_chart_starts_at_or_below_the_threshold(similarities, threshold, first_low):
    histogram = histogram_compute([_event(similarity=s) for s in similarities])
    first = histogram_first_shown(histogram, threshold=threshold)
    assert histogram[first].low == pytest.approx(first_low)
    assert histogram[first].low <= threshold <= histogram[-1].high


def test_repeat_labels():
    assert repeat_label(_event(action=SERVED, similarity=0.9, review_verdict=CORRECT)) is True
    assert repeat_label(_event(action=SERVED, similarity=0.9, review_verdict=INCORRECT)) is False
    assert repeat_label(_event(action=ANSWERED, similarity=0.8, review_verdict=CORRECT)) is False
    assert repeat_label(_event(action=ANSWERED, similarity=0.8, review_verdict=INCORRECT)) is True
    assert repeat_label(_event(action=ANSWERED, similarity=0.8)) is None
    assert repeat_label(_event(action=ANSWERED, similarity=None, review_verdict=CORRECT)) is None
    assert repeat_label(_event(action=DedupAction.BYPASSED, similarity=0.99, review_verdict=CORRECT)) is None


def test_what_if_table():
    # labelled: 0.95 repeat, 0.91 not, 0.93 repeat (shadow), 0.85 not, 0.88 repeat (missed)
    rows, sample = what_if_compute(EVENTS, thresholds=(0.80, 0.86, 0.90, 0.92, 0.96), current=0.90)
    assert sample == 5
    table = {row.threshold: (row.hits, row.false_hits, row.missed_repeats) for row in rows}
    assert table == {
        0.80: (5, 2, 0),
        0.86: (4, 1, 0),
        0.90: (3, 1, 1),
        0.92: (2, 0, 1),
        0.96: (0, 0, 3),
    }
    precision = {row.threshold: row.precision for row in rows}
    assert precision[0.80] == pytest.approx(3 / 5)
    assert precision[0.90] == pytest.approx(2 / 3)
    assert precision[0.92] == 1.0
    assert precision[0.96] is None
    assert [row.threshold for row in rows if row.is_current] == [0.90]


def test_what_if_adds_the_current_threshold_and_counts_a_tie_as_a_hit():
    events = [_event(action=SERVED, similarity=0.875, review_verdict=INCORRECT)]
    rows, _ = what_if_compute(events, thresholds=(0.8, 0.9), current=0.875)
    assert [(row.threshold, row.hits, row.false_hits, row.is_current) for row in rows] == [
        (0.8, 1, 1, False),
        (0.875, 1, 1, True),
        (0.9, 0, 0, False),
    ]


def test_what_if_leaves_out_thresholds_below_the_lowest_gate():
    """A decision without the duplicate head never runs below its floor: rows under it would promise hits that
    cannot happen."""
    assert what_if_candidates(thresholds=(0.7, 0.85, 0.9, 0.95), current=0.9, lowest=0.9) == [0.9, 0.95]
    assert what_if_candidates(thresholds=(0.7, 0.9), current=0.8, lowest=None) == [0.7, 0.8, 0.9]
    rows, sample = what_if_compute(EVENTS, thresholds=(0.80, 0.86, 0.90, 0.92), current=0.90, lowest=0.90)
    assert [row.threshold for row in rows] == [0.90, 0.92]
    assert sample == 5


def test_what_if_counts_a_hit_only_when_the_match_passed_the_other_checks():
    # A fresh answer whose nearest match (0.93) the duplicate head refused, judged correct (not a repeat): no
    # threshold would have served it, so it is no false hit anywhere. A missed repeat at 0.84 that passed the
    # checks is a hit once the threshold reaches it; one at 0.95 that failed them is missed at every threshold.
    events = [
        _event(action=ANSWERED, similarity=0.93, review_verdict=CORRECT, match_passes_checks=False),
        _event(action=ANSWERED, similarity=0.84, review_verdict=INCORRECT, match_passes_checks=True),
        _event(action=ANSWERED, similarity=0.95, review_verdict=INCORRECT, match_passes_checks=False),
    ]
    rows, sample = what_if_compute(events, thresholds=(0.80, 0.90), current=None)
    assert sample == 3
    assert [(row.threshold, row.hits, row.false_hits, row.missed_repeats) for row in rows] == [
        (0.80, 1, 0, 1),
        (0.90, 0, 0, 2),
    ]


@pytest.mark.parametrize(
    ("ms", "shown"), [(0, "0 ms"), (850, "850 ms"), (12_500, "12.5 s"), (192_000, "3.2 min"), (5_400_000, "1.5 h")]
)
def test_duration_display(ms, shown):
    assert duration_display(ms) == shown


def test_percent_display():
    assert percent_display(None) == "–"
    assert percent_display(1 / 3) == "33.3%"


@pytest.mark.parametrize(
    ("threshold", "shown"), [(0.76, "0.76"), (0.855, "0.855"), (0.9, "0.9"), (1.0, "1"), (0.8401, "0.8401")]
)
def test_threshold_display(threshold, shown):
    assert threshold_display(threshold) == shown


# --- the grouped selector against the per-event figures ------------------------------------------------------
@pytest.mark.django_db
def test_figures_from_database_groups_equal_the_figures_of_every_event(tenant, other_tenant):
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    from django.utils import timezone

    from conversations.models import DedupEvent
    from conversations.review.dashboard import dashboard_compute
    from conversations.review.dashboard_selectors import dashboard_get
    from tests.factories import DedupEventFactory

    local = ZoneInfo("America/New_York")
    # Just before and after local midnight (UTC 04:59 / 05:01 in March), so a day cut in UTC would differ.
    moments = [datetime(2026, 3, 1, 4, 59, tzinfo=ZoneInfo("UTC")), datetime(2026, 3, 1, 5, 1, tzinfo=ZoneInfo("UTC"))]
    similarities = [None, -0.3, 0.0, 0.024, 0.025, 0.5, 0.8999999999999, 0.9, 0.924, 0.95, 1.0]
    actions = [SERVED, ANSWERED, DedupAction.BYPASSED, DedupAction.SMALLTALK]
    verdicts = [ReviewVerdict.UNREVIEWED, CORRECT, INCORRECT]
    created = []
    for index in range(120):
        event = DedupEventFactory(
            tenant=tenant,
            turn=None,
            action=actions[index % 4],
            similarity=similarities[index % len(similarities)],
            shadow=index % 7 == 0,
            relaxed=index % 5 == 0,
            excluded_count=index % 4,
            tokens_saved=(index * 37) % 500,
            ms_saved=(index * 13.25) % 900,
            review_verdict=verdicts[index % 3],
            match_passes_checks=(None, True, False)[index % 3],
        )
        created.append((event.pk, moments[index % 2] + timedelta(days=index % 3)))
    for pk, moment in created:
        DedupEvent.objects.for_tenant(tenant).filter(pk=pk).update(created_at=moment)
    DedupEventFactory(tenant=other_tenant, turn=None, action=SERVED, similarity=0.99)  # never counted

    start, end = date(2026, 2, 28), date(2026, 3, 3)
    with timezone.override(local):
        every_event = [
            EventFacts(
                day=timezone.localtime(e.created_at).date(),
                action=e.action,
                similarity=e.similarity,
                shadow=e.shadow,
                relaxed=e.relaxed,
                excluded_count=e.excluded_count,
                tokens_saved=e.tokens_saved,
                ms_saved=e.ms_saved,
                review_verdict=e.review_verdict,
                match_passes_checks=e.match_passes_checks,
            )
            for e in DedupEvent.objects.for_tenant(tenant)
        ]
        expected = dashboard_compute(every_event, start=start, end=end, threshold=0.9)
        grouped = dashboard_get(tenant=tenant, start=start, end=end, threshold=0.9)

    assert len(every_event) == 120
    assert {day.day for day in expected.days if day.totals.turns} == {
        date(2026, 2, 28),
        date(2026, 3, 1),
        date(2026, 3, 2),
        date(2026, 3, 3),
    }

    def plain(totals):
        return {**totals.__dict__, "ms_saved": pytest.approx(totals.ms_saved)}

    def assert_same(grouped, expected) -> None:
        assert plain(grouped.totals) == plain(expected.totals)
        assert [(d.day, plain(d.totals)) for d in grouped.days] == [(d.day, plain(d.totals)) for d in expected.days]
        assert grouped.histogram == expected.histogram
        assert grouped.what_if == expected.what_if and grouped.what_if_sample == expected.what_if_sample

    assert_same(grouped, expected)
    assert grouped.totals.turns == 120 and sum(b.hits + b.misses for b in grouped.histogram) > 0
    assert grouped.totals.reviewed_hits > 0 and grouped.totals.false_hits > 0

    # The days up to 1 March rolled up (2 March at noon, local): the same figures, from rows and events together.
    from conversations.models import DedupDayFigures
    from conversations.services import dedup_figures_rollup

    with timezone.override(local):
        assert dedup_figures_rollup(now=datetime(2026, 3, 2, 12, 0, tzinfo=local)) == 2  # from the first event on
        rolled = DedupDayFigures.objects.for_tenant(tenant).filter(day__gte=start)
        assert sorted(rolled.values_list("day", "events")) == [(date(2026, 2, 28), 20), (date(2026, 3, 1), 40)]
        assert_same(dashboard_get(tenant=tenant, start=start, end=end, threshold=0.9), expected)

        # A review after the rollup counts at once: reviews are not in the rows.
        served_unreviewed = DedupEvent.objects.for_tenant(tenant).filter(
            action=SERVED, review_verdict=ReviewVerdict.UNREVIEWED, created_at__lt=moments[1] + timedelta(days=1)
        )
        DedupEvent.objects.for_tenant(tenant).filter(pk=served_unreviewed.first().pk).update(review_verdict=INCORRECT)
        every_event = [
            EventFacts(**{**facts.__dict__, "review_verdict": verdict})
            for facts, verdict in zip(
                every_event,
                DedupEvent.objects.for_tenant(tenant).values_list("review_verdict", flat=True),
                strict=True,
            )
        ]
        expected = dashboard_compute(every_event, start=start, end=end, threshold=0.9)
        after_review = dashboard_get(tenant=tenant, start=start, end=end, threshold=0.9)
        assert after_review.totals.false_hits == grouped.totals.false_hits + 1
        assert_same(after_review, expected)

        # Everything rolled up: still the same.
        dedup_figures_rollup(now=datetime(2026, 3, 10, tzinfo=local))
        assert_same(dashboard_get(tenant=tenant, start=start, end=end, threshold=0.9), expected)


@pytest.mark.django_db
def test_rollup_writes_each_past_day_once_after_it_settles_and_per_time_zone(tenant):
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from django.utils import timezone

    from conversations.models import DedupDayFigures, DedupEvent
    from conversations.services import dedup_figures_rollup
    from tests.factories import DedupEventFactory

    utc = ZoneInfo("UTC")
    for moment in (datetime(2026, 5, 1, 10, tzinfo=utc), datetime(2026, 5, 3, 23, 59, tzinfo=utc)):
        event = DedupEventFactory(tenant=tenant, turn=None)
        DedupEvent.objects.for_tenant(tenant).filter(pk=event.pk).update(created_at=moment)
    rows = DedupDayFigures.objects.for_tenant(tenant)

    with timezone.override(utc):
        # Five minutes after midnight, 3 May is not settled yet: 1 and 2 May only (nothing before the first event).
        assert dedup_figures_rollup(now=datetime(2026, 5, 4, 0, 5, tzinfo=utc)) == 2
        assert sorted(rows.values_list("day", "events")) == [(date(2026, 5, 1), 1), (date(2026, 5, 2), 0)]
        assert dedup_figures_rollup(now=datetime(2026, 5, 4, 0, 15, tzinfo=utc)) == 1
        assert dedup_figures_rollup(now=datetime(2026, 5, 4, 0, 15, tzinfo=utc)) == 0  # idempotent
        # A budget per run: the rest waits for the next run.
        assert dedup_figures_rollup(now=datetime(2026, 5, 8, 1, tzinfo=utc), max_days=2) == 2
        assert dedup_figures_rollup(now=datetime(2026, 5, 8, 1, tzinfo=utc), max_days=2) == 2
        assert dedup_figures_rollup(now=datetime(2026, 5, 8, 1, tzinfo=utc)) == 0
        assert rows.count() == 7

    # In another time zone the rows are not used, and the next run rewrites them (3 May 23:59 UTC is 4 May there).
    tokyo = ZoneInfo("Asia/Tokyo")
    with timezone.override(tokyo):
        from conversations.review.dashboard_selectors import dashboard_get

        live = dashboard_get(tenant=tenant, start=date(2026, 5, 1), end=date(2026, 5, 7), threshold=0.9)
        assert [d.totals.turns for d in live.days] == [1, 0, 0, 1, 0, 0, 0]
        assert dedup_figures_rollup(now=datetime(2026, 5, 8, 1, tzinfo=tokyo)) == 7
        assert set(rows.values_list("time_zone", flat=True)) == {"Asia/Tokyo"}
        assert dict(rows.values_list("day", "events"))[date(2026, 5, 4)] == 1
        rolled = dashboard_get(tenant=tenant, start=date(2026, 5, 1), end=date(2026, 5, 7), threshold=0.9)
        assert [d.totals.turns for d in rolled.days] == [1, 0, 0, 1, 0, 0, 0]


@pytest.mark.django_db
def test_rollup_writes_the_newest_days_of_every_tenant_first(tenant, other_tenant):
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    from django.utils import timezone

    from conversations.models import DedupDayFigures, DedupEvent
    from conversations.services import dedup_figures_rollup
    from tests.factories import DedupEventFactory

    utc = ZoneInfo("UTC")
    for owner in (tenant, other_tenant):
        for offset in range(10):  # 1 to 10 June
            event = DedupEventFactory(tenant=owner, turn=None)
            moment = datetime(2026, 6, 1, 12, tzinfo=utc) + timedelta(days=offset)
            DedupEvent.objects.for_tenant(owner).filter(pk=event.pk).update(created_at=moment)

    with timezone.override(utc):
        assert dedup_figures_rollup(now=datetime(2026, 6, 11, 1, tzinfo=utc), max_days=4) == 4
        # 10 and 9 June for both tenants, not four days of the first tenant's history.
        for owner in (tenant, other_tenant):
            days = set(DedupDayFigures.objects.for_tenant(owner).values_list("day", flat=True))
            assert days == {date(2026, 6, 10), date(2026, 6, 9)}
        assert dedup_figures_rollup(now=datetime(2026, 6, 11, 1, tzinfo=utc)) == 16
        assert DedupDayFigures.objects.for_tenant(tenant).count() == 10


@pytest.mark.django_db
def test_rollup_finds_missing_days_in_two_queries_whatever_the_number_of_tenants(django_assert_num_queries):
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from django.utils import timezone

    from conversations.models import DedupDayFigures, DedupEvent
    from conversations.services import dedup_figures_rollup
    from lifecycle.services import tenant_get_or_create
    from tests.factories import DedupEventFactory

    utc = ZoneInfo("UTC")
    tenants = [tenant_get_or_create(slug=f"t{n}", name=f"T{n}")[0] for n in range(4)]
    for offset, tenant in enumerate(tenants[:3]):  # the fourth has no events: nothing to roll up
        event = DedupEventFactory(tenant=tenant, turn=None)
        moment = datetime(2026, 5, 1 + offset, 10, tzinfo=utc)
        DedupEvent.objects.for_tenant(tenant).filter(pk=event.pk).update(created_at=moment)

    with timezone.override(utc):
        now = datetime(2026, 5, 6, 1, tzinfo=utc)
        assert dedup_figures_rollup(now=now) == 5 + 4 + 3  # each tenant from its first event's day to 5 May
        assert sorted(DedupDayFigures.objects.unscoped().values_list("tenant__slug", "day"))[:2] == [
            ("t0", date(2026, 5, 1)),
            ("t0", date(2026, 5, 2)),
        ]
        with django_assert_num_queries(2):
            assert dedup_figures_rollup(now=now) == 0
