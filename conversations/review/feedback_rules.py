"""What an end user's rating of an answer says about the dedup decision behind it: plain functions, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from conversations.models import DedupAction, FeedbackRating, ReviewVerdict


@dataclass(frozen=True)
class FalseHitSuspicion:
    suspected: bool
    since: datetime | None


def false_hit_suspicion(
    *,
    rating: str,
    turn_decision: str,
    review_verdict: str,
    suspected: bool,
    since: datetime | None,
    now: datetime,
) -> FalseHitSuspicion:
    """The audit event's suspicion after a rating of its turn.

    Only a turn that was served a stored answer (`served_cached` applied, not shadow mode's) can be a false hit: a
    thumbs-down on it makes the event suspected, from the first time it was (a repeated thumbs-down keeps that
    time, so a review queue read oldest first stays in order). A thumbs-up withdraws the suspicion while support
    has not reviewed the event; once reviewed, the suspicion is part of what support judged and stays."""
    if turn_decision != DedupAction.SERVED_CACHED:
        return FalseHitSuspicion(suspected=suspected, since=since)
    if rating == FeedbackRating.DOWN:
        return FalseHitSuspicion(suspected=True, since=since if suspected and since is not None else now)
    if review_verdict == ReviewVerdict.UNREVIEWED:
        return FalseHitSuspicion(suspected=False, since=None)
    return FalseHitSuspicion(suspected=suspected, since=since)
