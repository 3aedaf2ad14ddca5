"""The admin's review queue of one tenant's day: drawn once (`review_queue.review_picks` over the recent unreviewed
decisions whose pair a verdict can label, its random share seeded by the tenant and the day), recorded as ReviewPick
rows with each pick's inclusion probability, and read back as they were drawn."""

from __future__ import annotations

import random
from datetime import date, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from conversations.dedup.duplicate_model import pair_model_default
from conversations.models import DedupAction, DedupEvent, DedupPolicy, ReviewPick, ReviewVerdict
from conversations.review.label_rules import ANSWER_REFUSALS
from conversations.review.review_queue_rules import ReviewCandidate, review_picks
from conversations.turn.policy import dedup_policy_get
from retrieval.embeddings import model_id as embedding_model_id
from retrieval.embeddings import offered_models
from tenants.models import Tenant

# Decisions older than this are not drawn: the queue is about the traffic of the days before.
LOOKBACK_DAYS = 7
CANDIDATES_READ = 2000  # the newest ones read per draw
CANDIDATE_FIELDS = (
    "pk",
    "similarity",
    "threshold",
    "pair_probability",
    "suspected_false_hit",
    "suspected_false_hit_at",
)


def head_cuts() -> dict[str, float]:
    """The cut the shipped head of each offered embedding model serves at (its pair reader's when it has one), by the
    model's id (what a turn records as its question's `question_vector_model`): a decision's probability is read
    against the cut of the head that gave it. A turn of a model offered no longer is read against the bundled model's
    cut."""
    return {embedding_model_id(name): pair_model_default(name).decision_cut for name in offered_models()}


def review_queue_seed(*, tenant: Tenant, day: date) -> random.Random:
    """The random share's source for one tenant's day: the same tenant and day always draw the same picks from the
    same candidates, so a draw can be checked and repeated."""
    return random.Random(f"review-queue:{int(tenant.pk)}:{day.isoformat()}")


def review_queue_of_day(
    *, tenant: Tenant, day: date, quota: int | None = None, random_share: float | None = None
) -> list[ReviewPick]:
    """The tenant's review picks of `day`, drawing them first when that day has none yet. The draw takes the
    policy row's lock, so two reviewers opening the queue at once get one draw, not two. `quota` defaults to
    KB_REVIEW_QUEUE_DAILY_QUOTA and `random_share` to KB_REVIEW_QUEUE_RANDOM_SHARE."""
    quota = settings.REVIEW_QUEUE_DAILY_QUOTA if quota is None else quota
    random_share = settings.REVIEW_QUEUE_RANDOM_SHARE if random_share is None else random_share
    dedup_policy_get(tenant=tenant)
    with transaction.atomic():
        DedupPolicy.objects.for_tenant(tenant).select_for_update().get()
        if not ReviewPick.objects.for_tenant(tenant).filter(day=day).exists():
            _draw(tenant=tenant, day=day, quota=quota, random_share=random_share)
    return list(
        ReviewPick.objects.for_tenant(tenant)
        .filter(day=day)
        .select_related("dedup_event__turn", "dedup_event__matched_turn")
        .order_by("rank")
    )


def _draw(*, tenant: Tenant, day: date, quota: int, random_share: float) -> None:
    since = timezone.now() - timedelta(days=LOOKBACK_DAYS)
    events = (
        DedupEvent.objects.for_tenant(tenant)
        .filter(
            created_at__gte=since,
            review_verdict=ReviewVerdict.UNREVIEWED,
            action__in=[DedupAction.SERVED_CACHED, DedupAction.BYPASSED, DedupAction.ANSWERED],
            turn__isnull=False,
        )
        # A matched stored question: an earlier turn's, or a curated answer's phrasing.
        .filter(Q(matched_turn__isnull=False) | ~Q(curated_question=""))
        .exclude(reason__in=sorted(ANSWER_REFUSALS))
        .exclude(pk__in=ReviewPick.objects.for_tenant(tenant).values("dedup_event_id"))
        .order_by("-created_at", "-id")
        .values_list(*CANDIDATE_FIELDS, "turn__question_vector_model")
    )[:CANDIDATES_READ]
    rows = sorted(events, key=lambda row: (row[5] is None, row[5] or timezone.now(), row[0]))
    cuts = head_cuts()
    bundled_cut = pair_model_default().decision_cut
    picks = review_picks(
        candidates=[
            ReviewCandidate(
                event_id=pk,
                similarity=similarity,
                gate=threshold,
                probability=probability,
                cut=cuts.get(vector_model, bundled_cut),
                flagged=flagged,
            )
            for pk, similarity, threshold, probability, flagged, _, vector_model in rows
        ],
        quota=quota,
        random_share=random_share,
        rng=review_queue_seed(tenant=tenant, day=day),
    )
    ReviewPick.objects.bulk_create(
        [
            ReviewPick(
                tenant=tenant,
                day=day,
                dedup_event_id=pick.event_id,
                reason=str(pick.reason),
                rank=rank,
                inclusion_probability=pick.probability,
            )
            for rank, pick in enumerate(picks, start=1)
        ]
    )
