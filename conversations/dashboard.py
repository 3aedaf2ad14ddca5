"""The dedup dashboard's figures.

Everything shown is computed by the plain functions here from `EventFacts` (the few fields of a `DedupEvent`
the figures need), so each figure is tested against events with known values; `dashboard_events` is the one
selector that reads them, always for one tenant and one period.

Definitions the page states and the tests hold:
- a turn is one audit event (the log has one row per turn);
- repeated passages avoided: the already-shown documents or chunks excluded from a turn's search, counted only
  when the exclusion was applied (not relaxed for the turn, not shadow mode);
- a cache hit is a turn that was served a stored answer (`served_cached`, not in shadow mode); savings
  (tokens, milliseconds) count only applied hits; shadow-mode decisions are counted apart as would-be hits;
- the reviewed false-hit rate is, among reviewed `served_cached` decisions (shadow or not), the share
  reviewed as incorrect;
- the what-if table uses reviewed decisions that were taken on similarity (served a stored answer, or
  answered afresh with a nearest match): a decision's review says whether the nearest earlier question was
  really the same question. Served and judged correct, or answered afresh and judged incorrect (a missed
  repeat): a true repeat. Served and judged incorrect (a false hit), or answered afresh and judged correct:
  not a repeat. At a candidate threshold t, hits are those with similarity >= t whose match passed the
  decision's other checks (the duplicate head, numbers, negation, follow-up context: `match_passes_checks`,
  unknown for events from before it was kept, which count on similarity alone), false hits the hits that
  were not repeats, precision = (hits - false hits) / hits, missed repeats the true repeats not hit at t.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from django.utils import timezone

from conversations.models import DedupAction, DedupEvent, ReviewVerdict, SettingsChange
from tenants.models import Tenant

HISTOGRAM_BINS = 40  # bins of 0.025 over [0, 1]
WHAT_IF_THRESHOLDS = (0.70, 0.75, 0.80, 0.82, 0.84, 0.86, 0.88, 0.90, 0.92, 0.94, 0.96, 0.98)
MAX_PERIOD_DAYS = 366
EVENT_FACT_FIELDS = (
    "action",
    "similarity",
    "shadow",
    "relaxed",
    "excluded_count",
    "tokens_saved",
    "ms_saved",
    "review_verdict",
    "match_passes_checks",
)


@dataclass(frozen=True)
class EventFacts:
    day: date
    action: str
    similarity: float | None = None
    shadow: bool = False
    relaxed: bool = False
    excluded_count: int = 0
    tokens_saved: int = 0
    ms_saved: float = 0.0
    review_verdict: str = ReviewVerdict.UNREVIEWED
    match_passes_checks: bool | None = None

    @property
    def is_hit(self) -> bool:
        """Served a stored answer for real (not a shadow-mode decision)."""
        return self.action == DedupAction.SERVED_CACHED and not self.shadow

    @property
    def passages_avoided(self) -> int:
        """Already-shown passages kept out of this turn's search: none when the exclusion was relaxed (the search
        ran without it) or only logged (shadow mode)."""
        return 0 if self.relaxed or self.shadow else self.excluded_count

    @property
    def is_reviewed(self) -> bool:
        return self.review_verdict != ReviewVerdict.UNREVIEWED


@dataclass(frozen=True)
class Totals:
    turns: int = 0
    hits: int = 0
    shadow_hits: int = 0
    tokens_saved: int = 0
    ms_saved: float = 0.0
    passages_avoided: int = 0
    relaxed: int = 0
    reviewed_hits: int = 0
    false_hits: int = 0

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.turns if self.turns else None

    @property
    def false_hit_rate(self) -> float | None:
        return self.false_hits / self.reviewed_hits if self.reviewed_hits else None


@dataclass(frozen=True)
class DayFigures:
    day: date
    totals: Totals


@dataclass(frozen=True)
class HistogramBin:
    low: float
    high: float
    hits: int
    misses: int


@dataclass(frozen=True)
class WhatIfRow:
    threshold: float
    hits: int
    false_hits: int
    missed_repeats: int
    is_current: bool = False

    @property
    def precision(self) -> float | None:
        return (self.hits - self.false_hits) / self.hits if self.hits else None


@dataclass(frozen=True)
class Dashboard:
    start: date
    end: date
    threshold: float
    totals: Totals
    days: list[DayFigures] = field(default_factory=list)
    histogram: list[HistogramBin] = field(default_factory=list)
    what_if: list[WhatIfRow] = field(default_factory=list)
    what_if_sample: int = 0


# --- pure figures ------------------------------------------------------------------------------------------
def totals_compute(events: Iterable[EventFacts]) -> Totals:
    turns = hits = shadow_hits = tokens = passages = relaxed = reviewed_hits = false_hits = 0
    ms = 0.0
    for event in events:
        turns += 1
        passages += event.passages_avoided
        relaxed += event.relaxed
        if event.action != DedupAction.SERVED_CACHED:
            continue
        if event.shadow:
            shadow_hits += 1
        else:
            hits += 1
            tokens += event.tokens_saved
            ms += event.ms_saved
        if event.is_reviewed:
            reviewed_hits += 1
            false_hits += event.review_verdict == ReviewVerdict.INCORRECT
    return Totals(
        turns=turns,
        hits=hits,
        shadow_hits=shadow_hits,
        tokens_saved=tokens,
        ms_saved=ms,
        passages_avoided=passages,
        relaxed=relaxed,
        reviewed_hits=reviewed_hits,
        false_hits=false_hits,
    )


def days_compute(events: Iterable[EventFacts], *, start: date, end: date) -> list[DayFigures]:
    """One entry per calendar day from `start` to `end` inclusive, days without turns included (zeros), so
    the chart's x axis is continuous. Events outside the period are ignored."""
    by_day: dict[date, list[EventFacts]] = {}
    for event in events:
        if start <= event.day <= end:
            by_day.setdefault(event.day, []).append(event)
    span = (end - start).days + 1
    return [
        DayFigures(day=day, totals=totals_compute(by_day.get(day, ())))
        for day in (start + timedelta(days=offset) for offset in range(max(span, 0)))
    ]


def similarity_bin(similarity: float, bins: int = HISTOGRAM_BINS) -> int:
    """The bin of a similarity over [0, 1] cut in `bins` equal parts; values below 0 fall in the first bin
    and 1.0 in the last. The small epsilon keeps 0.9 (stored as 0.8999...) in the bin that starts at 0.9."""
    return min(max(math.floor(similarity * bins + 1e-9), 0), bins - 1)


def histogram_compute(events: Iterable[EventFacts], *, bins: int = HISTOGRAM_BINS) -> list[HistogramBin]:
    """Nearest-match similarity of every turn that had one, split into served stored answers (hits, shadow
    decisions included, as they show where the threshold cuts) and the rest (misses)."""
    hits = [0] * bins
    misses = [0] * bins
    for event in events:
        if event.similarity is None:
            continue
        index = similarity_bin(event.similarity, bins)
        if event.action == DedupAction.SERVED_CACHED:
            hits[index] += 1
        else:
            misses[index] += 1
    width = 1.0 / bins
    return [
        HistogramBin(low=round(i * width, 6), high=round((i + 1) * width, 6), hits=hits[i], misses=misses[i])
        for i in range(bins)
    ]


def repeat_label(event: EventFacts) -> bool | None:
    """Whether the event's nearest earlier question was really the same question, as its review says; None
    when the event is unreviewed, had no nearest match, or was not decided on similarity."""
    if not event.is_reviewed or event.similarity is None:
        return None
    correct = event.review_verdict == ReviewVerdict.CORRECT
    if event.action == DedupAction.SERVED_CACHED:
        return correct
    if event.action == DedupAction.ANSWERED:
        return not correct
    return None


def what_if_compute(
    events: Iterable[EventFacts], *, thresholds: Sequence[float] = WHAT_IF_THRESHOLDS, current: float | None = None
) -> tuple[list[WhatIfRow], int]:
    """Rows of the threshold what-if table (the current threshold added when missing), and how many reviewed
    decisions they rest on."""
    labelled = [
        (event.similarity, event.match_passes_checks is not False, label)
        for event in events
        if (label := repeat_label(event)) is not None
    ]
    candidates = sorted({round(t, 4) for t in thresholds} | ({round(current, 4)} if current is not None else set()))
    rows = []
    for threshold in candidates:
        served = [(passes and similarity >= threshold - 1e-9, is_repeat) for similarity, passes, is_repeat in labelled]
        hits = [is_repeat for hit, is_repeat in served if hit]
        missed = sum(1 for hit, is_repeat in served if is_repeat and not hit)
        rows.append(
            WhatIfRow(
                threshold=threshold,
                hits=len(hits),
                false_hits=sum(1 for is_repeat in hits if not is_repeat),
                missed_repeats=missed,
                is_current=current is not None and math.isclose(threshold, current, abs_tol=5e-5),
            )
        )
    return rows, len(labelled)


def dashboard_compute(events: Sequence[EventFacts], *, start: date, end: date, threshold: float) -> Dashboard:
    what_if, sample = what_if_compute(events, current=threshold)
    return Dashboard(
        start=start,
        end=end,
        threshold=threshold,
        totals=totals_compute(events),
        days=days_compute(events, start=start, end=end),
        histogram=histogram_compute(events),
        what_if=what_if,
        what_if_sample=sample,
    )


# --- display ----------------------------------------------------------------------------------------------
def percent_display(ratio: float | None) -> str:
    """0.1234 -> "12.3%"; no ratio (nothing to divide by) -> "–"."""
    return "–" if ratio is None else f"{ratio * 100:.1f}%"


def duration_display(ms: float) -> str:
    """Milliseconds as the largest unit that keeps the number readable: "850 ms", "12.5 s", "3.2 min", "1.5 h"."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# --- selector ----------------------------------------------------------------------------------------------
def period_bounds(*, start: date, end: date) -> tuple[datetime, datetime]:
    """[start 00:00, end+1 00:00) in the site's time zone: the period includes the whole `end` day."""
    tz = timezone.get_current_timezone()
    return (
        datetime.combine(start, time.min, tzinfo=tz),
        datetime.combine(end + timedelta(days=1), time.min, tzinfo=tz),
    )


def dashboard_events(*, tenant: Tenant, start: date, end: date) -> list[EventFacts]:
    """The tenant's audit events created from `start` to `end` (whole days), as `EventFacts`."""
    since, until = period_bounds(start=start, end=end)
    fields = EVENT_FACT_FIELDS
    rows = (
        DedupEvent.objects.for_tenant(tenant)
        .filter(created_at__gte=since, created_at__lt=until)
        .values_list("created_at", *fields)
        .iterator(chunk_size=2000)
    )
    return [
        EventFacts(day=timezone.localtime(row[0]).date(), **dict(zip(fields, row[1:], strict=True))) for row in rows
    ]


def settings_changes_in_period(*, tenant: Tenant, start: date, end: date, limit: int = 20) -> list[SettingsChange]:
    """The tenant's policy changes in the period, newest first, so a jump in a chart can be read against the
    change that caused it."""
    since, until = period_bounds(start=start, end=end)
    return list(
        SettingsChange.objects.for_tenant(tenant).filter(subject="policy", changed_at__gte=since, changed_at__lt=until)[
            :limit
        ]
    )


def dashboard_get(*, tenant: Tenant, start: date, end: date, threshold: float) -> Dashboard:
    return dashboard_compute(
        dashboard_events(tenant=tenant, start=start, end=end), start=start, end=end, threshold=threshold
    )
