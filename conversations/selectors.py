"""Reads of the conversations app. Every selector takes the tenant and filters by it."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from django.db.models import Max, Min, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.db.models.functions import Substr

from conversations.models import (
    DEFAULT_PRECISION_TARGET,
    Conversation,
    CuratedAnswer,
    CuratedPhrasing,
    DedupAction,
    DedupEvent,
    DedupPolicy,
    DuplicateLabel,
    DuplicateModelVersion,
    Feedback,
    ReviewPick,
    Turn,
)
from conversations.review.label_rules import TRAINING_SOURCES, training_labels_pick
from conversations.review.learning_curve import LearningCurve, curves_for_rows
from conversations.review.review_queue import LOOKBACK_DAYS
from conversations.review.review_queue_rules import PickReason, RandomDraw, random_inclusion_probability
from conversations.training.labelled_pairs import LabelledQuestionPair
from kbplatform.errors import NotFoundError
from kbplatform.text import user_id_canonical
from retrieval.embeddings import offered_models, primary_model
from retrieval.models import KnowledgeBase
from tenants.models import Tenant

# A title made from the first question: at most this many characters, cut at a word where there is one.
DEFAULT_TITLE_CHARS = 80
# How much of the first question is read to make it (the title needs no more; a question may hold 4,000).
_FIRST_QUESTION_READ = 4 * DEFAULT_TITLE_CHARS
_WHITESPACE = re.compile(r"\s+")


def title_from_question(question: str) -> str:
    """The question on one line, whitespace collapsed, cut to `DEFAULT_TITLE_CHARS` at the last word that fits (or
    mid-word when a single word is longer) with an ellipsis when something was cut."""
    line = _WHITESPACE.sub(" ", question).strip()
    if len(line) <= DEFAULT_TITLE_CHARS:
        return line
    cut = line[: DEFAULT_TITLE_CHARS - 1]
    word_end = cut.rfind(" ")
    if word_end > DEFAULT_TITLE_CHARS // 2:
        cut = cut[:word_end]
    return cut.rstrip() + "\u2026"


def conversation_title(conversation: Conversation) -> str:
    """The title the client gave, else one made from the conversation's first question (small talk is no question),
    else empty. The first question comes from `conversations_with_first_question`; a conversation loaded without it
    has none."""
    if conversation.title:
        return conversation.title
    return title_from_question(getattr(conversation, "first_question", None) or "")


def conversations_with_first_question(*, tenant: Tenant, conversations: QuerySet[Conversation]) -> QuerySet:
    """`conversations` with `first_question`: the start of the first question asked in each (the lowest turn number
    that is not small talk), in the same query."""
    first = (
        Turn.objects.for_tenant(tenant)
        .filter(conversation_id=OuterRef("pk"))
        .exclude(decision=DedupAction.SMALLTALK)
        .order_by("number")
        .values_list(Substr("question", 1, _FIRST_QUESTION_READ))[:1]
    )
    return conversations.annotate(first_question=Subquery(first))


def conversation_get(
    *, tenant: Tenant, conversation_id: int, allowed_knowledge_base_id: int | None = None
) -> Conversation:
    """The tenant's conversation (expired ones included, until purged), or 404."""
    conversations = Conversation.objects.for_tenant(tenant).filter(pk=conversation_id)
    conversation = conversations_with_first_question(tenant=tenant, conversations=conversations).first()
    if conversation is None or (
        allowed_knowledge_base_id is not None and conversation.knowledge_base_id != allowed_knowledge_base_id
    ):
        raise NotFoundError("Conversation not found.")
    return conversation


def conversation_list(
    *,
    tenant: Tenant,
    user_id: str | None = None,
    knowledge_base_id: int | None = None,
    allowed_knowledge_base_id: int | None = None,
) -> QuerySet[Conversation]:
    """The tenant's conversations (expired ones included, until purged), most recently active first, each with its
    `first_question`. With `allowed_knowledge_base_id` (a key bound to one knowledge base), only that one's: a filter
    naming another knowledge base is an empty list, as a filter naming another tenant's is."""
    conversations = Conversation.objects.for_tenant(tenant)
    if allowed_knowledge_base_id is not None:
        conversations = conversations.filter(knowledge_base_id=allowed_knowledge_base_id)
    if knowledge_base_id is not None:
        conversations = conversations.filter(knowledge_base_id=knowledge_base_id)
    if user_id is not None:
        # Stored in NFC (conversation_create): the filter finds a user however the client spells the id.
        conversations = conversations.filter(user_id=user_id_canonical(user_id))
    conversations = conversations.order_by("-last_active_at", "-id")
    return conversations_with_first_question(tenant=tenant, conversations=conversations)


def conversation_turns(*, tenant: Tenant, conversation: Conversation) -> QuerySet[Turn]:
    """The conversation's stored turns in the order they were taken (turn numbers; a deleted turn leaves a gap)."""
    return Turn.objects.for_tenant(tenant).filter(conversation=conversation).defer("question_vector").order_by("number")


def conversation_latest_turns(*, tenant: Tenant, conversation: Conversation, limit: int) -> list[Turn]:
    """The conversation's last `limit` stored turns, in the order they were taken."""
    latest = conversation_turns(tenant=tenant, conversation=conversation).order_by("-number")[:limit]
    return list(reversed(latest))


def turn_get(*, tenant: Tenant, turn_id: int, allowed_knowledge_base_id: int | None = None) -> Turn:
    """The tenant's turn, or 404 (another tenant's, or of a knowledge base the key does not reach)."""
    turn = Turn.objects.for_tenant(tenant).filter(pk=turn_id).defer("question_vector").first()
    if turn is None or (allowed_knowledge_base_id is not None and turn.knowledge_base_id != allowed_knowledge_base_id):
        raise NotFoundError("Turn not found.")
    return turn


def feedback_get(*, tenant: Tenant, turn: Turn) -> Feedback:
    """The feedback on the tenant's `turn`, or 404 when none was given."""
    feedback = Feedback.objects.for_tenant(tenant).filter(turn=turn).first()
    if feedback is None:
        raise NotFoundError("This turn has no feedback yet.", extra={"turn": turn.pk})
    return feedback


def feedback_list(
    *,
    tenant: Tenant,
    rating: str | None = None,
    conversation_id: int | None = None,
    allowed_knowledge_base_id: int | None = None,
) -> QuerySet[Feedback]:
    """The tenant's feedback, most recently given or changed first. With `allowed_knowledge_base_id`, only feedback
    on that knowledge base's conversations."""
    feedback = Feedback.objects.for_tenant(tenant)
    if allowed_knowledge_base_id is not None:
        feedback = feedback.filter(conversation__knowledge_base_id=allowed_knowledge_base_id)
    if rating:
        feedback = feedback.filter(rating=rating)
    if conversation_id is not None:
        feedback = feedback.filter(conversation_id=conversation_id)
    return feedback.order_by("-updated_at", "-id")


def dedup_event_list(
    *,
    tenant: Tenant,
    action: str | None = None,
    conversation_id: int | None = None,
    created_from: datetime | None = None,
    created_to: datetime | None = None,
    similarity_min: float | None = None,
    similarity_max: float | None = None,
    shadow: bool | None = None,
    suspected_false_hit: bool | None = None,
    embedding_model: str | None = None,
    allowed_knowledge_base_id: int | None = None,
) -> QuerySet[DedupEvent]:
    """The tenant's audit events, newest first. With `allowed_knowledge_base_id` (a key bound to one knowledge
    base), only events of that knowledge base's conversations; events whose conversation was purged can no longer
    be placed in a knowledge base and are left out for such a key."""
    events = DedupEvent.objects.for_tenant(tenant)
    if allowed_knowledge_base_id is not None:
        events = events.filter(conversation__knowledge_base_id=allowed_knowledge_base_id)
    if action:
        events = events.filter(action=action)
    if conversation_id is not None:
        events = events.filter(conversation_ref=conversation_id)
    if created_from is not None:
        events = events.filter(created_at__gte=created_from)
    if created_to is not None:
        events = events.filter(created_at__lt=created_to)
    if similarity_min is not None:
        events = events.filter(similarity__gte=similarity_min)
    if similarity_max is not None:
        events = events.filter(similarity__lte=similarity_max)
    if shadow is not None:
        events = events.filter(shadow=shadow)
    if suspected_false_hit is not None:
        events = events.filter(suspected_false_hit=suspected_false_hit)
    if embedding_model:
        events = events.filter(embedding_model=embedding_model)
    return events.order_by("-created_at", "-id")


def dedup_event_get(*, tenant: Tenant, event_id: int, allowed_knowledge_base_id: int | None = None) -> DedupEvent:
    """The tenant's audit event, or 404 (another tenant's, or, for a key bound to one knowledge base, an event of
    another knowledge base's conversation or of a purged one, as `dedup_event_list` leaves them out)."""
    events = DedupEvent.objects.for_tenant(tenant).filter(pk=event_id)
    if allowed_knowledge_base_id is not None:
        events = events.filter(conversation__knowledge_base_id=allowed_knowledge_base_id)
    event = events.first()
    if event is None:
        raise NotFoundError("Audit event not found.")
    return event


def knowledge_base_recent_questions(*, tenant: Tenant, knowledge_base_id: int, limit: int) -> list[str]:
    """The tenant's latest distinct questions asked of one knowledge base, newest first, at most `limit`: the
    questions of its turns that searched or served an answer (small talk searches nothing, so it is left out), each
    text once (compared without case or surrounding spaces)."""
    questions: list[str] = []
    seen: set[str] = set()
    turns = (
        Turn.objects.for_tenant(tenant)
        .filter(knowledge_base_id=knowledge_base_id)
        .exclude(decision=DedupAction.SMALLTALK)
        .order_by("-created_at", "-id")
        .values_list("question", flat=True)
    )
    for question in turns.iterator(chunk_size=500):
        key = question.strip().casefold()
        if not key or key in seen:
            continue
        seen.add(key)
        questions.append(question.strip())
        if len(questions) >= limit:
            break
    return questions


LOOKBACK = timedelta(days=LOOKBACK_DAYS)


def labels_of_model(*, embedding_model: str) -> Q:
    """The labels that teach the verifier of `embedding_model` (by name), a filter of DuplicateLabel: those of the
    audit events of that model's conversations, and those that name no model (imported, their event gone, or an
    event from before events named their model), which are text pairs any model can learn from. An event of a model
    the deployment no longer offers counts for the primary model, as its knowledge base is then searched with it
    (`embeddings.knowledge_base_model`)."""
    of_model = Q(dedup_event__isnull=True) | Q(dedup_event__embedding_model__in=("", embedding_model))
    if embedding_model == primary_model():
        of_model |= ~Q(dedup_event__embedding_model__in=offered_models())
    return of_model


def duplicate_labels_training(*, tenant: Tenant, embedding_model: str) -> list[LabelledQuestionPair]:
    """The tenant's labelled question pairs the verifier of `embedding_model` trains on (`labels_of_model`), in
    label id order (`label_rules.training_labels_pick`): support verdicts and imported labels, one per audit event
    with support's first. An end user's thumbs-down is a
    suspicion and is left out until support reviews the event (which writes a support label that then counts). Each
    label carries the review queue's pick of its event, when there is one (an event is picked at most once): its
    reason and inclusion probability, which tell a random pick of known chance from the rest; a random pick's is the
    chance the queue's random draws so far had of picking its event (`random_inclusion_probability`), not that of the
    one draw that did."""
    picks = ReviewPick.objects.for_tenant(tenant).filter(dedup_event_id=OuterRef("dedup_event_id"))
    labels = (
        DuplicateLabel.objects.for_tenant(tenant)
        .filter(labels_of_model(embedding_model=embedding_model), source__in=sorted(TRAINING_SOURCES))
        .only("pk", "dedup_event_id", "source", "question", "stored_question", "is_duplicate")
        .annotate(
            pick_reason=Subquery(picks.values("reason")[:1]),
            pick_probability=Subquery(picks.values("inclusion_probability")[:1]),
            event_created_at=Subquery(
                DedupEvent.objects.for_tenant(tenant).filter(pk=OuterRef("dedup_event_id")).values("created_at")[:1]
            ),
        )
        .order_by("pk")
    )
    draws = random_draws(tenant=tenant)
    return [
        LabelledQuestionPair(
            question=label.question,
            stored_question=label.stored_question,
            is_duplicate=label.is_duplicate,
            source=label.source,
            label_id=label.pk,
            pick_reason=label.pick_reason or "",
            pick_probability=(
                random_inclusion_probability(created_at=label.event_created_at, draws=draws, lookback=LOOKBACK)
                if label.pick_reason == PickReason.RANDOM and label.event_created_at is not None
                else label.pick_probability
            ),
        )
        for label in training_labels_pick(labels.iterator(chunk_size=2000))
    ]


def random_draws(*, tenant: Tenant) -> list[RandomDraw]:
    """Each day's random draw of the tenant's review queue: when it ran and each candidate's chance in it (every
    random pick of one draw carries the same)."""
    days = (
        ReviewPick.objects.for_tenant(tenant)
        .filter(reason=PickReason.RANDOM, inclusion_probability__isnull=False)
        .values("day")
        .annotate(drawn_at=Min("picked_at"), probability=Max("inclusion_probability"))
        .order_by("day")
    )
    return [RandomDraw(drawn_at=row["drawn_at"], probability=row["probability"]) for row in days]


def learning_curves(*, tenants: list[Tenant]) -> list[LearningCurve]:
    """The learning curve (`learning_curve`) of each tenant and embedding model it has verifier versions of: the labels
    that train that model's verifier, its versions' held-out figures and the tenant's precision target; a few queries
    per tenant and model, so the caller limits how many tenants it asks for."""
    curves = []
    for tenant in tenants:
        policy = DedupPolicy.objects.for_tenant(tenant).only("precision_target").first()
        rows_by_model: dict[str, list[tuple]] = {}
        for model, *row in DuplicateModelVersion.objects.for_tenant(tenant).values_list(
            "embedding_model", "version", "label_count", "status", "figures"
        ):
            rows_by_model.setdefault(model, []).append(tuple(row))
        for model, rows in sorted(rows_by_model.items()):
            reviews = (
                DuplicateLabel.objects.for_tenant(tenant)
                .filter(labels_of_model(embedding_model=model), source__in=sorted(TRAINING_SOURCES))
                .count()
            )
            curves.append(
                curves_for_rows(
                    tenant=tenant.name or tenant.slug,
                    embedding_model=model,
                    reviews=reviews,
                    precision_target=policy.precision_target if policy else DEFAULT_PRECISION_TARGET,
                    rows=rows,
                )
            )
    return curves


def _phrasings_of(tenant: Tenant) -> Prefetch:
    return Prefetch("phrasings", queryset=CuratedPhrasing.objects.for_tenant(tenant).order_by("id"))


def curated_answer_get(
    *, tenant: Tenant, curated_answer_id: int, only_knowledge_base_id: int | None = None
) -> CuratedAnswer | None:
    """The tenant's curated answer (in `only_knowledge_base_id` when a key is limited to it), with its phrasings and
    knowledge base; None otherwise, so another tenant's looks like one that does not exist."""
    queryset = (
        CuratedAnswer.objects.for_tenant(tenant)
        .filter(pk=curated_answer_id)
        .select_related("knowledge_base")
        .prefetch_related(_phrasings_of(tenant))
    )
    if only_knowledge_base_id is not None:
        queryset = queryset.filter(knowledge_base_id=only_knowledge_base_id)
    return queryset.first()


def curated_answers_list(
    *, tenant: Tenant, knowledge_base: KnowledgeBase, enabled: bool | None, limit: int, offset: int
) -> tuple[int, list[CuratedAnswer]]:
    """(how many match, the page): the knowledge base's curated answers oldest first, enabled or not, or either."""
    queryset = CuratedAnswer.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base)
    if enabled is not None:
        queryset = queryset.filter(enabled=enabled)
    return queryset.count(), list(
        queryset.order_by("id").prefetch_related(_phrasings_of(tenant))[offset : offset + limit]
    )
