"""Which decisions are worth a person's minute: the review queue's picking, plain functions, no I/O.

A day's queue of one tenant holds at most its quota of unreviewed decisions whose pair a verdict can label
(`label_rules.verdict_label`), chosen in this order:
1. flagged by a user: a thumbs-down on a served stored answer (`DedupEvent.suspected_false_hit`), oldest first;
2. then, taking turns, the strongest of each:
   - the duplicate head and the cosine disagree: the head calls the pair a duplicate while the cosine is under the
     gate, or the head refuses a pair whose cosine alone would serve it (at or above HEADLESS_THRESHOLD_FLOOR);
     strongest = the further apart the two are;
   - near the gate: a cosine within NEAR_GATE_MARGIN of the gate, or a head probability within NEAR_CUT_MARGIN of
     its cut; strongest = the closest;
3. a random share: `random_share` of the quota (rounded down) is drawn uniformly at random from the candidates the
   rules above did not pick (any of them, worth picking or not), and so is whatever the rules leave of the quota
   (with no share, nothing is drawn and the queue is the rules' picks alone).
   These picks are spread evenly among the rules' picks after the flagged ones, so a reviewer who stops part way
   still labels some of each.

Every pick carries the chance the draw had of picking it, given the day's candidates: 1 for a rule's pick (the rules
are deterministic), k / M for a random one (k drawn from the M candidates the rules left). Near-gate picks teach the
head most, but they are the hardest decisions, so a verifier judged on them alone is judged on a sample unlike the
traffic; the random picks, weighted by the inverse of their chance, are a sample of the traffic the rules left, and
with the rules' picks counted once each, of the whole traffic (`verifier_judging.activation_judge`). The randomness is
a `random.Random` the caller seeds, so one day's draw of one tenant is reproducible.

A decision left unpicked stays a candidate of the next days' draws while it is recent (the queue's lookback), so its
chance of being drawn at random by now is that of any of those draws, not of the one that drew it
(`random_inclusion_probability`): weighted by the inverse of one day's chance alone, a pick of a busy first day would
stand for 30 to 70 decisions that later days also drew, and a few such picks would outweigh the rest.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from itertools import zip_longest
from typing import NamedTuple

from conversations.dedup.decisions import HEADLESS_THRESHOLD_FLOOR

NEAR_GATE_MARGIN = 0.03
NEAR_CUT_MARGIN = 0.10


class PickReason(StrEnum):
    FLAGGED = "flagged"  # a user's thumbs-down
    DISAGREEMENT = "disagreement"  # the head and the cosine disagree
    NEAR_GATE = "near_gate"  # close to the cosine gate or the head's cut
    RANDOM = "random"  # drawn uniformly from what the rules left, with a known chance


@dataclass(frozen=True)
class ReviewCandidate:
    event_id: int
    similarity: float | None  # cosine of the matched pair
    gate: float  # the cosine gate the decision applied (the event's threshold)
    probability: float | None  # the duplicate head's, None when it did not score the pair
    cut: float  # the head's cut
    flagged: bool  # suspected false hit


class QueuePick(NamedTuple):
    event_id: int
    reason: PickReason
    probability: float  # the chance this draw had of picking the event, given the day's candidates


def pick_reason(candidate: ReviewCandidate) -> tuple[PickReason, float] | None:
    """Why the decision is worth reviewing and how strongly (higher first within a reason), or None."""
    if candidate.flagged:
        return PickReason.FLAGGED, 0.0
    similarity, probability = candidate.similarity, candidate.probability
    if similarity is None:
        return None
    if probability is not None:
        head_says_duplicate = probability >= candidate.cut
        if head_says_duplicate and similarity < candidate.gate:
            return PickReason.DISAGREEMENT, (probability - candidate.cut) + (candidate.gate - similarity)
        if not head_says_duplicate and similarity >= HEADLESS_THRESHOLD_FLOOR:
            return PickReason.DISAGREEMENT, (candidate.cut - probability) + (similarity - HEADLESS_THRESHOLD_FLOOR)
    distances = [abs(similarity - candidate.gate) / NEAR_GATE_MARGIN]
    if probability is not None:
        distances.append(abs(probability - candidate.cut) / NEAR_CUT_MARGIN)
    nearest = min(distances)
    if nearest <= 1.0:
        return PickReason.NEAR_GATE, 1.0 - nearest
    return None


def _rule_picks(candidates: Sequence[ReviewCandidate]) -> list[QueuePick]:
    """Every pick the rules would make, in review order, with no quota."""
    by_reason: dict[PickReason, list[tuple[float, int]]] = {reason: [] for reason in PickReason}
    flagged: list[int] = []
    for candidate in candidates:
        picked = pick_reason(candidate)
        if picked is None:
            continue
        reason, strength = picked
        if reason == PickReason.FLAGGED:
            flagged.append(candidate.event_id)
        else:
            by_reason[reason].append((-strength, candidate.event_id))
    picks = [QueuePick(event_id, PickReason.FLAGGED, 1.0) for event_id in flagged]
    disagreements = [
        QueuePick(event_id, PickReason.DISAGREEMENT, 1.0) for _, event_id in sorted(by_reason[PickReason.DISAGREEMENT])
    ]
    near = [QueuePick(event_id, PickReason.NEAR_GATE, 1.0) for _, event_id in sorted(by_reason[PickReason.NEAR_GATE])]
    for pair in zip_longest(disagreements, near):
        picks.extend(pick for pick in pair if pick is not None)
    return picks


def random_quota(*, quota: int, random_share: float, flagged: int) -> int:
    """How many of `quota` picks the random share is owed: `random_share` of the quota, rounded down, but never a
    place a flagged decision needs (flagged ones come first, whatever the share)."""
    owed = math.floor(max(quota, 0) * min(max(random_share, 0.0), 1.0) + 1e-9)
    return max(min(owed, quota - flagged), 0)


def review_picks(
    *,
    candidates: Sequence[ReviewCandidate],
    quota: int,
    random_share: float = 0.0,
    rng: random.Random | None = None,
) -> list[QueuePick]:
    """At most `quota` picks in review order (see the module): the flagged ones in the order given (the caller passes
    them oldest suspicion first), then the rules' disagreements and near-gate picks in turns, the strongest of each
    first, with the random share spread evenly among them. Ties go to the lower event id and the random draw depends
    only on `rng` and the set of candidates, so one set of candidates and one seed always give one queue. `rng` is
    needed only when something is drawn at random."""
    if quota <= 0:
        return []
    ranked = _rule_picks(candidates)
    flagged = [pick for pick in ranked if pick.reason == PickReason.FLAGGED]
    owed = random_quota(quota=quota, random_share=random_share, flagged=len(flagged))
    ruled = ranked[: quota - owed]
    if random_share <= 0 or len(ruled) == quota:
        return ruled
    taken = {pick.event_id for pick in ruled}
    pool = sorted({candidate.event_id for candidate in candidates} - taken)
    count = min(quota - len(ruled), len(pool))
    if count == 0:
        return ruled
    if rng is None:
        raise ValueError("a random share needs a seeded random.Random")
    drawn = [QueuePick(event_id, PickReason.RANDOM, count / len(pool)) for event_id in rng.sample(pool, count)]
    rest = ruled[len(flagged) :]
    # Evenly spread: each list's i-th pick at (i + 0.5) / its length of the way down; a rule's pick first on a tie.
    spread = sorted(
        [((i + 0.5) / len(rest), 0, pick) for i, pick in enumerate(rest)]
        + [((i + 0.5) / len(drawn), 1, pick) for i, pick in enumerate(drawn)],
        key=lambda placed: (placed[0], placed[1]),
    )
    return [*flagged, *(pick for _, _, pick in spread)]


class RandomDraw(NamedTuple):
    """One day's random draw of a tenant's queue: when it ran and the chance each candidate had (k / M)."""

    drawn_at: datetime
    probability: float


def random_inclusion_probability(*, created_at: datetime, draws: Iterable[RandomDraw], lookback: timedelta) -> float:
    """The chance that the queue's random draws so far picked a decision made at `created_at`: one minus the chance
    that every draw it was a candidate of (run at or after it, within `lookback` of it) passed it by. At least the
    chance of the draw that picked it, which is one of `draws`; 0 when none could have."""
    missed = 1.0
    for draw in draws:
        if created_at <= draw.drawn_at <= created_at + lookback and 0.0 < draw.probability <= 1.0:
            missed *= 1.0 - draw.probability
    return 1.0 - missed
