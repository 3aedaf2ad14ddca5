"""The dedup dashboard's figures.

Everything shown is computed by the plain functions here from `EventFacts` (the few fields of a `DedupEvent`
the figures need), so each figure is tested against events with known values; `conversations.review.dashboard_selectors`
reads them for one tenant and one period (`EventFacts.count` says how many events a row stands for). Verdicts are
left out of the rollups because they change; `what_if_from_counts` turns the reviewed decisions' counts per candidate
threshold into the table `what_if_compute` gives from single events.

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
from datetime import date, timedelta

from conversations.models import DedupAction, ReviewVerdict

HISTOGRAM_BINS = 40  # bins of 0.025 over [0, 1]
WHAT_IF_THRESHOLDS = (0.70, 0.75, 0.80, 0.82, 0.84, 0.86, 0.88, 0.90, 0.92, 0.94, 0.96, 0.98)
MAX_PERIOD_DAYS = 366


@dataclass(frozen=True)
class EventFacts:
    """One event, or a group of `count` events: with the same day, action, flags and review (`dashboard_groups`;
    `excluded_count`, `tokens_saved` and `ms_saved` are then the group's sums), or with the same action and
    histogram bin (`dashboard_histogram_groups`; `similarity_bin` stands in for the similarities)."""

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
    count: int = 1
    similarity_bin: int | None = None

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
class ModelWhatIf:
    """The what-if table's rows as a verifier that ran in shadow would have decided the same reviewed decisions
    (only those it ran beside), one column of the table per such verifier."""

    label: str
    rows: list[WhatIfRow]
    sample: int


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
    # The lowest gate the decisions can apply (without the duplicate head); None: any threshold.
    lowest_threshold: float | None = None
    # Per verifier that ran in shadow in the period: what it would have served, by the same rows.
    what_if_models: list[ModelWhatIf] = field(default_factory=list)


# --- pure figures ------------------------------------------------------------------------------------------
def totals_compute(events: Iterable[EventFacts], *, reviewed: Iterable[EventFacts] | None = None) -> Totals:
    """Totals of `events`. The review figures come from `reviewed` (single reviewed events) when it is given, and
    the review fields of `events` are then ignored (groups that leave reviews out); else from `events`."""
    turns = hits = shadow_hits = tokens = passages = relaxed = reviewed_hits = false_hits = 0
    ms = 0.0
    for event in reviewed or ():
        if event.action == DedupAction.SERVED_CACHED and event.is_reviewed:
            reviewed_hits += event.count
            false_hits += event.count if event.review_verdict == ReviewVerdict.INCORRECT else 0
    for event in events:
        count = event.count
        turns += count
        passages += event.passages_avoided
        relaxed += count if event.relaxed else 0
        if event.action != DedupAction.SERVED_CACHED:
            continue
        if event.shadow:
            shadow_hits += count
        else:
            hits += count
            tokens += event.tokens_saved
            ms += event.ms_saved
        if reviewed is None and event.is_reviewed:
            reviewed_hits += count
            false_hits += count if event.review_verdict == ReviewVerdict.INCORRECT else 0
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


def days_compute(
    events: Iterable[EventFacts], *, start: date, end: date, reviewed: Iterable[EventFacts] | None = None
) -> list[DayFigures]:
    """One entry per calendar day from `start` to `end` inclusive, days without turns included (zeros), so
    the chart's x axis is continuous. Events outside the period are ignored; `reviewed` as for totals_compute."""
    by_day: dict[date, list[EventFacts]] = {}
    for event in events:
        if start <= event.day <= end:
            by_day.setdefault(event.day, []).append(event)
    reviewed_by_day: dict[date, list[EventFacts]] | None = None
    if reviewed is not None:
        reviewed_by_day = {}
        for event in reviewed:
            reviewed_by_day.setdefault(event.day, []).append(event)
    span = (end - start).days + 1
    return [
        DayFigures(
            day=day,
            totals=totals_compute(
                by_day.get(day, ()), reviewed=None if reviewed_by_day is None else reviewed_by_day.get(day, ())
            ),
        )
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
        if event.similarity_bin is not None:
            if bins != HISTOGRAM_BINS:
                raise ValueError(f"events grouped in {HISTOGRAM_BINS} bins cannot fill {bins}")
            index = event.similarity_bin
        elif event.similarity is not None:
            index = similarity_bin(event.similarity, bins)
        else:
            continue
        if event.action == DedupAction.SERVED_CACHED:
            hits[index] += event.count
        else:
            misses[index] += event.count
    width = 1.0 / bins
    return [
        HistogramBin(low=round(i * width, 6), high=round((i + 1) * width, 6), hits=hits[i], misses=misses[i])
        for i in range(bins)
    ]


def histogram_first_shown(histogram: Sequence[HistogramBin], *, threshold: float) -> int:
    """The index of the first bin the similarity chart shows: the leading empty bins are left out, down to 0.5 at
    least, so the populated range fills the chart; never past the threshold's bin, so the threshold line is always on
    the chart, at its own value on the chart's axis (a threshold of 0.3 over similarities all above 0.6 was drawn off
    the chart's left edge)."""
    half = similarity_bin(0.5, len(histogram))
    filled = next((index for index, b in enumerate(histogram) if b.hits + b.misses), half)
    return min(half, filled, similarity_bin(threshold, len(histogram)))


def repeat_label(event: EventFacts) -> bool | None:
    """Whether the event's nearest earlier question was really the same question, as its review says; None
    when the event is unreviewed, had no nearest match, or was not decided on similarity."""
    if not event.is_reviewed or event.similarity is None:
        return None
    if event.action not in (DedupAction.SERVED_CACHED, DedupAction.ANSWERED):
        return None
    return _judged_repeat(action=event.action, review_verdict=event.review_verdict)


def _judged_repeat(*, action: str, review_verdict: str) -> bool:
    """A reviewed decision taken on similarity was a true repeat when it served and was judged correct, or answered
    afresh and was judged incorrect (a missed repeat)."""
    correct = review_verdict == ReviewVerdict.CORRECT
    return correct if action == DedupAction.SERVED_CACHED else not correct


def what_if_compute(
    events: Iterable[EventFacts],
    *,
    thresholds: Sequence[float] = WHAT_IF_THRESHOLDS,
    current: float | None = None,
    lowest: float | None = None,
) -> tuple[list[WhatIfRow], int]:
    """Rows of the threshold what-if table (the current threshold added when missing, none below `lowest`), and how
    many reviewed decisions they rest on."""
    labelled = [
        (event.similarity, event.match_passes_checks is not False, label)
        for event in events
        if (label := repeat_label(event)) is not None
    ]
    candidates = what_if_candidates(thresholds=thresholds, current=current, lowest=lowest)
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


def what_if_candidates(
    *, thresholds: Sequence[float] = WHAT_IF_THRESHOLDS, current: float | None, lowest: float | None = None
) -> list[float]:
    """The what-if table's thresholds: the fixed candidates and the current one, rounded to 4 places, ascending;
    none below `lowest`, the lowest gate the decisions can apply (`decisions.cosine_gate_floor`: without the
    duplicate head they never serve below HEADLESS_THRESHOLD_FLOOR, so a row under it would promise hits that
    cannot happen)."""
    candidates = {round(t, 4) for t in thresholds} | ({round(current, 4)} if current is not None else set())
    return sorted(t for t in candidates if lowest is None or t >= round(lowest, 4))


@dataclass(frozen=True)
class WhatIfCounts:
    """Reviewed decisions taken on similarity with one action and verdict (`total`), and how many of them each
    candidate threshold would have served (`hits[i]` for `candidates[i]`: similarity at or above it, and a match
    that passed the other checks). What the database counts for the what-if table instead of returning each event."""

    action: str
    review_verdict: str
    total: int
    hits: tuple[int, ...]

    @property
    def is_repeat(self) -> bool:
        return _judged_repeat(action=self.action, review_verdict=self.review_verdict)


def what_if_from_counts(
    counts: Iterable[WhatIfCounts], *, candidates: Sequence[float], current: float | None
) -> tuple[list[WhatIfRow], int]:
    """The rows `what_if_compute` gives for the same events, from their counts (`candidates` as
    `what_if_candidates` gives them)."""
    counts = list(counts)
    rows = []
    for index, threshold in enumerate(candidates):
        rows.append(
            WhatIfRow(
                threshold=threshold,
                hits=sum(c.hits[index] for c in counts),
                false_hits=sum(c.hits[index] for c in counts if not c.is_repeat),
                missed_repeats=sum(c.total - c.hits[index] for c in counts if c.is_repeat),
                is_current=current is not None and math.isclose(threshold, current, abs_tol=5e-5),
            )
        )
    return rows, sum(c.total for c in counts)


def dashboard_compute(
    events: Sequence[EventFacts],
    *,
    start: date,
    end: date,
    threshold: float,
    histogram_events: Sequence[EventFacts] | None = None,
    reviewed: Sequence[EventFacts] | None = None,
    what_if: tuple[list[WhatIfRow], int] | None = None,
    lowest_threshold: float | None = None,
    what_if_models: Sequence[ModelWhatIf] = (),
) -> Dashboard:
    """All figures from `events`; the histogram from `histogram_events`, the review figures from `reviewed` (reviewed
    events, single or grouped) and the what-if table from `what_if` (else from `reviewed`), when they are given (the
    selectors' groups, which leave reviews out), else from `events` too."""
    if what_if is None:
        what_if = what_if_compute(events if reviewed is None else reviewed, current=threshold, lowest=lowest_threshold)
    what_if, sample = what_if
    return Dashboard(
        start=start,
        end=end,
        threshold=threshold,
        totals=totals_compute(events, reviewed=reviewed),
        days=days_compute(events, start=start, end=end, reviewed=reviewed),
        histogram=histogram_compute(events if histogram_events is None else histogram_events),
        what_if=what_if,
        what_if_sample=sample,
        lowest_threshold=lowest_threshold,
        what_if_models=list(what_if_models),
    )


# --- display ----------------------------------------------------------------------------------------------
def percent_display(ratio: float | None) -> str:
    """0.1234 -> "12.3%"; no ratio (nothing to divide by) -> "–"."""
    return "–" if ratio is None else f"{ratio * 100:.1f}%"


def threshold_display(threshold: float) -> str:
    """A similarity threshold as set, to at most 4 significant digits and no trailing zeros: 0.76 -> "0.76",
    0.855 -> "0.855" (two decimals would show 0.855 as "0.86")."""
    return format(threshold, ".4g")


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
