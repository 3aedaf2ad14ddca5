"""Conversations, their QA pairs, what each turn showed, the tenant's dedup policy and intents, and the audit log.

The database is the source of truth for all of it; Redis holds only a hot copy per conversation
(`conversations.turn.state`), rebuilt from these rows on a miss.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from tenants.scoping import TenantOwnedModel

# The cosine gate in front of the duplicate head, chosen with it on the train split of ../shared/data/qqp by
# `manage.py duplicate_head_train` (it is the "threshold" in conversations/dedup/duplicate_model.json): see
# docs/conversations.md ("Threshold choice").
DEFAULT_THRESHOLD = 0.76
DEFAULT_QUESTION_WINDOW = 10
DEFAULT_EXCLUSION_WINDOW = 5
DEFAULT_MIN_RESULTS = 3
DEFAULT_TTL_SECONDS = 24 * 3600
# The largest count a PositiveIntegerField holds on every database (PostgreSQL's integer): token counts the answer
# service reports, and sums of them, are bounded by it before they are stored.
COUNT_MAX = 2**31 - 1
# The precision a tenant's trained duplicate verifier is chosen for, and must reach on its held-out labels to be
# activated: a wrong stored answer costs more than a fresh one (docs/conversations.md, "Learning from review").
DEFAULT_PRECISION_TARGET = 0.90
INTENT_OTHER = "other"


class DedupScope(models.TextChoices):
    OFF = "off", "Off (no question dedup)"
    SESSION = "session", "This conversation"
    USER = "user", "The same end user, across conversations"
    TENANT = "tenant", "Any conversation of the tenant"


class Granularity(models.TextChoices):
    DOC = "doc", "Whole documents"
    CHUNK = "chunk", "Single chunks"


class DedupAction(models.TextChoices):
    ANSWERED = "answered", "Answered (fresh retrieval)"
    SERVED_CACHED = "served_cached", "Served a stored answer"
    BYPASSED = "bypassed", "Dedup bypassed or a match refused"
    SMALLTALK = "smalltalk", "Small talk"


class IntentBehaviour(models.TextChoices):
    NORMAL = "normal", "Normal question"
    SMALLTALK = "smalltalk", "Small talk: no dedup, no retrieval"
    REPEAT = "repeat", "Show again: exclusion off for the turn"
    ELABORATE = "elaborate", "Explain again: question dedup off for the turn"


class FeedbackRating(models.TextChoices):
    UP = "up", "Thumbs up"
    DOWN = "down", "Thumbs down"


class AnswerState(models.TextChoices):
    COMPLETE = "complete", "Complete"
    INTERRUPTED = "interrupted", "Stream cut: the client went away before the answer was complete"
    FAILED = "failed", "The answer service failed while the answer was streamed"


class ReviewVerdict(models.TextChoices):
    UNREVIEWED = "unreviewed", "Not reviewed"
    CORRECT = "correct", "Correct decision"
    INCORRECT = "incorrect", "Incorrect decision"


def default_allowlisted_intents() -> list[str]:
    return [INTENT_OTHER]


class Conversation(TenantOwnedModel):
    knowledge_base = models.ForeignKey(
        "retrieval.KnowledgeBase", on_delete=models.CASCADE, related_name="conversations"
    )
    user_id = models.CharField(max_length=255, blank=True, default="", help_text="The customer app's end-user id.")
    # The title the client gave (`conversation_rename`); empty when it gave none, and the API then shows one made
    # from the first question (`selectors.conversation_title`), so a title never goes stale behind the turns.
    title = models.CharField(max_length=200, blank=True, default="", db_default="")
    # Turns taken so far: read and incremented under select_for_update, so concurrent turns get distinct numbers.
    turn_count = models.PositiveIntegerField(default=0)
    # Bumped when a stored turn changes outside a turn (a client's answer to a retrieve-mode turn). The Redis hot
    # copy records the revision it was built from and is used only while both it and `turn_count` still match, so
    # a copy that could not be dropped (Redis unreachable at that moment) is never served once Redis is back.
    state_revision = models.PositiveIntegerField(default=0)
    # Set at creation: every turn's search keeps only chunks of documents whose metadata matches
    # (`retrieval.metadata.metadata_filter_validate`); null searches the whole knowledge base.
    metadata_filter = models.JSONField(null=True, blank=True, default=None)
    created_at = models.DateTimeField(auto_now_add=True)
    last_active_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)
    # The digest of the conversation as a chat client holds it after its last turn taken through the OpenAI-compatible
    # endpoint (`turn/transcripts.py`): a request that sends that transcript back, with no `conversation_id`, goes on
    # in this conversation. Empty for conversations no chat-completions turn has touched.
    transcript_digest = models.CharField(max_length=64, blank=True, default="", db_default="")

    class Meta:
        ordering = ["-last_active_at"]
        indexes = [
            models.Index(fields=["tenant", "user_id", "last_active_at"], name="conversation_tenant_user"),
            models.Index(
                fields=["tenant", "transcript_digest"],
                name="conversation_transcript",
                condition=~models.Q(transcript_digest=""),
            ),
        ]

    def __str__(self) -> str:
        return f"conversation {self.pk}"


class Turn(TenantOwnedModel):
    """One QA pair. A turn whose `answer` is empty (retrieve mode, answer not yet supplied), or whose search met a
    partial index (`partial_index`), never serves later duplicates."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="turns")
    knowledge_base = models.ForeignKey("retrieval.KnowledgeBase", on_delete=models.CASCADE, related_name="+")
    user_id = models.CharField(max_length=255, blank=True, default="")
    number = models.PositiveIntegerField()
    question = models.TextField()
    question_vector = models.BinaryField(help_text="float32 little-endian, L2-normalised")
    # The embedding model that made `question_vector` (`retrieval.embeddings.model_id`): the vector is compared only
    # with vectors of that model. Empty for turns written before it was recorded, whose model is unknown: they never
    # match (a miss costs a fresh answer; a cosine across two models serves a wrong one).
    question_vector_model = models.CharField(
        max_length=16, blank=True, default="", help_text="Id of the embedding model that made the question vector."
    )
    intent = models.CharField(max_length=64, default=INTENT_OTHER)
    mode = models.CharField(max_length=10, default="answer")
    answer = models.TextField(blank=True, default="")
    answer_tokens = models.PositiveIntegerField(default=0)
    # A streamed answer that did not complete (`answer_state` interrupted or failed) keeps what was streamed in
    # `answer_partial` and leaves `answer` empty, so the pair never answers a later duplicate.
    answer_state = models.CharField(
        max_length=12, choices=AnswerState.choices, default=AnswerState.COMPLETE, db_default=AnswerState.COMPLETE
    )
    answer_partial = models.TextField(blank=True, default="", db_default="")
    answer_error = models.CharField(max_length=300, blank=True, default="", db_default="")
    # The standalone question a follow-up was rewritten into (DedupPolicy.rewrite_followups, with an LLM); the turn's
    # vector, search and duplicate check are that question's. Empty when the question was taken as asked.
    rewritten_question = models.TextField(blank=True, default="", db_default="")
    # The turn searched a knowledge base whose index was partial (`IndexState.partial`: a re-index running, vectors
    # not yet rebuilt ranking at random): its sources, and any answer made from them, may miss what that search could
    # not find, so the pair never answers a later duplicate (the duplicate is answered afresh). False for a turn that
    # searched nothing and for turns written before it was recorded.
    partial_index = models.BooleanField(default=False, db_default=False)
    # The metadata filter the turn searched under (`retrieval.metadata.metadata_filter_key`: "" for none). A stored
    # answer is served only to a question asked under an equal filter: found among other documents, it may rest on
    # passages the new question's filter leaves out, or miss the ones it keeps.
    metadata_filter_key = models.CharField(max_length=64, blank=True, default="", db_default="")
    # chunk id -> content hash at answer time: a stored answer is served only while every hash still matches.
    source_chunks = models.JSONField(default=dict)
    source_chunk_ids = models.JSONField(default=list)
    context_tokens = models.PositiveIntegerField(default=0)
    decision = models.CharField(max_length=16, choices=DedupAction.choices)
    similarity = models.FloatField(null=True, blank=True)
    matched_turn = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # A turn that served a stored answer: the QA pair that answer belongs to (never itself a served copy), so a
    # later duplicate of this turn is served that pair's answer as it is then. Null for every other turn.
    answer_origin = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # A turn that served a curated answer (or a copy of one): that answer. A later repeat of this turn serves it only
    # while it is enabled, and as it reads then. Null for every other turn.
    curated_answer = models.ForeignKey(
        "CuratedAnswer", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    elapsed_ms = models.FloatField(default=0.0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation_id", "number"]
        constraints = [models.UniqueConstraint(fields=["conversation", "number"], name="turn_unique_number")]
        indexes = [
            models.Index(fields=["tenant", "knowledge_base", "created_at"], name="turn_tenant_kb_created"),
            models.Index(fields=["tenant", "user_id", "created_at"], name="turn_tenant_user_created"),
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id}#{self.number}"


class ConsumedItem(TenantOwnedModel):
    """A document or chunk shown in a conversation, with the last turn that showed it."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="consumed_items")
    item_id = models.BigIntegerField()
    kind = models.CharField(max_length=5, choices=Granularity.choices)
    turn_number = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["conversation", "kind", "item_id"], name="consumed_unique_item"),
        ]
        indexes = [models.Index(fields=["conversation", "turn_number"], name="consumed_conv_turn")]

    def __str__(self) -> str:
        return f"{self.kind}:{self.item_id}@{self.turn_number}"


class DedupPolicy(TenantOwnedModel):
    scope = models.CharField(max_length=8, choices=DedupScope.choices, default=DedupScope.SESSION)
    threshold = models.FloatField(
        default=DEFAULT_THRESHOLD,
        validators=[MinValueValidator(0.0001), MaxValueValidator(1.0)],
        help_text="Cosine similarity at or above which a question counts as a repeat (0 < threshold <= 1).",
    )
    question_window = models.PositiveIntegerField(
        default=DEFAULT_QUESTION_WINDOW, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    exclusion_enabled = models.BooleanField(default=True)
    exclusion_window = models.PositiveIntegerField(
        default=DEFAULT_EXCLUSION_WINDOW, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    # Chunk by default: MTRAG conversations come back to the same documents, and leaving out a whole document for
    # one shown passage cost more novel recall than it saved (bench/conversations.py, docs/conversations.md).
    granularity = models.CharField(max_length=5, choices=Granularity.choices, default=Granularity.CHUNK)
    min_results = models.PositiveIntegerField(
        default=DEFAULT_MIN_RESULTS, validators=[MinValueValidator(0), MaxValueValidator(100)]
    )
    ttl_seconds = models.PositiveIntegerField(default=DEFAULT_TTL_SECONDS, validators=[MinValueValidator(1)])
    allowlisted_intents = models.JSONField(default=default_allowlisted_intents)
    shadow_mode = models.BooleanField(default=False, help_text="Decide and log, but do not apply.")
    precision_target = models.FloatField(
        default=DEFAULT_PRECISION_TARGET,
        validators=[MinValueValidator(0.5), MaxValueValidator(0.999)],
        help_text="Precision a verifier trained from reviews is cut for, and must reach on held-out labels to become "
        "active (0.5 to 0.999).",
    )
    rewrite_followups = models.BooleanField(
        default=False,
        db_default=False,
        help_text="With an LLM configured: rewrite a follow-up into a standalone question before the duplicate check "
        "and the search.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "dedup policies"
        constraints = [models.UniqueConstraint(fields=["tenant"], name="dedup_policy_one_per_tenant")]

    def __str__(self) -> str:
        return f"dedup policy of tenant {self.tenant_id}"


class Intent(TenantOwnedModel):
    """A tenant's intent: a question's intent is its nearest example phrase above a floor, else `other`."""

    name = models.SlugField(max_length=64)
    behaviour = models.CharField(max_length=10, choices=IntentBehaviour.choices, default=IntentBehaviour.NORMAL)
    examples = models.JSONField(default=list)
    # Embeddings of `examples` (float32 rows), filled on first use; cleared whenever the examples change, and made
    # again when `example_vectors_model` is not the model in use (`retrieval.embeddings.model_id`).
    example_vectors = models.BinaryField(null=True, blank=True)
    example_vectors_model = models.CharField(max_length=16, blank=True, default="")
    is_builtin = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="intent_unique_name")]

    def __str__(self) -> str:
        return self.name


class DedupEvent(TenantOwnedModel):
    """The audit log: one row per turn, saying what was decided, against which policy, and why. Rows outlive
    the conversation they describe (ids are kept when the conversation is purged)."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.SET_NULL, null=True, blank=True, related_name="dedup_events"
    )
    conversation_ref = models.BigIntegerField(db_index=True)
    turn = models.ForeignKey(Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="dedup_events")
    turn_ref = models.BigIntegerField(null=True, blank=True)
    action = models.CharField(max_length=16, choices=DedupAction.choices)
    intent = models.CharField(max_length=64, default=INTENT_OTHER)
    reason = models.CharField(max_length=200, blank=True, default="")
    similarity = models.FloatField(null=True, blank=True)
    matched_turn = models.ForeignKey(Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    matched_turn_ref = models.BigIntegerField(null=True, blank=True)
    pair_probability = models.FloatField(
        null=True, blank=True, help_text="The duplicate head's probability for the matched pair (none: not asked)."
    )
    match_passes_checks = models.BooleanField(
        null=True,
        blank=True,
        help_text="Whether the matched pair passed every check but the similarity gate (stored answer, numbers, "
        "negation, duplicate head, follow-up context); none for events without a match or from before it was kept.",
    )
    scope = models.CharField(max_length=8, choices=DedupScope.choices)
    threshold = models.FloatField()
    question_window = models.PositiveIntegerField()
    exclusion_window = models.PositiveIntegerField()
    granularity = models.CharField(max_length=5, choices=Granularity.choices)
    excluded_count = models.PositiveIntegerField(default=0)
    relaxed = models.BooleanField(default=False)
    shadow = models.BooleanField(default=False, help_text="Shadow mode: `action` was decided but not applied.")
    tokens_saved = models.PositiveIntegerField(default=0)
    ms_saved = models.FloatField(default=0.0)
    rewritten_question = models.TextField(
        blank=True, default="", db_default="", help_text="The standalone question the follow-up was rewritten into."
    )
    review_verdict = models.CharField(max_length=10, choices=ReviewVerdict.choices, default=ReviewVerdict.UNREVIEWED)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    review_note = models.TextField(blank=True, default="", help_text="Why the reviewer judged the decision so.")
    # The verifier that decided (`DuplicateModelVersion`; none: the shipped head), named also in `verifier_label`,
    # which outlives the version row. In shadow, a candidate's decision on the same candidates, not applied.
    verifier = models.ForeignKey(
        "DuplicateModelVersion", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    verifier_label = models.CharField(max_length=40, blank=True, default="")
    shadow_verifier = models.ForeignKey(
        "DuplicateModelVersion", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    shadow_verifier_hit = models.BooleanField(null=True, blank=True)
    shadow_verifier_probability = models.FloatField(null=True, blank=True)
    shadow_verifier_passes_checks = models.BooleanField(null=True, blank=True)
    # The end user gave a thumbs-down to the stored answer this turn served (`feedback_set`): a false hit until
    # support reviews it. Set and cleared only by feedback, by the rule in `feedback_rules.false_hit_suspicion`.
    suspected_false_hit = models.BooleanField(
        default=False,
        db_default=False,
        help_text="The end user rated the stored answer this turn served thumbs-down: support should review it.",
    )
    suspected_false_hit_at = models.DateTimeField(null=True, blank=True)
    # A decision on a curated answer's phrasings (served, or a close phrasing refused): the answer and the phrasing
    # matched, and that phrasing's text as it was (the stored question of the pair, for review and learning, which
    # outlives an edit of the phrasing). `matched_turn` is then null: no earlier turn was matched.
    curated_answer = models.ForeignKey(
        "CuratedAnswer", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    curated_answer_ref = models.BigIntegerField(null=True, blank=True)
    curated_question = models.TextField(
        blank=True, default="", db_default="", help_text="The curated phrasing the question was matched with."
    )
    # The embedding model (by name) the question was embedded and decided with: its knowledge base's. A label of this
    # event trains that model's verifier only (`selectors.duplicate_labels_training`); empty for events from before
    # it was kept whose conversation was gone.
    embedding_model = models.CharField(max_length=200, blank=True, default="", db_default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The review queue of suspected false hits: a few in a great many, read oldest suspicion first.
            models.Index(
                fields=["tenant", "suspected_false_hit_at"],
                condition=models.Q(suspected_false_hit=True),
                name="dedupevent_tenant_suspected",
            ),
            models.Index(fields=["tenant", "action", "created_at"], name="dedupevent_tenant_action"),
            # The dashboard and the day rollup read one tenant's events by time, whatever their action.
            models.Index(fields=["tenant", "created_at"], name="dedupevent_tenant_created"),
            # The dashboard reads reviewed events one by one: a few in a great many.
            models.Index(
                fields=["tenant", "created_at"],
                condition=~models.Q(review_verdict="unreviewed"),
                name="dedupevent_tenant_reviewed",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} (conversation {self.conversation_ref})"


class Feedback(TenantOwnedModel):
    """The end user's rating of one turn's answer: one per turn, replaced when given again. Deleted with its turn
    (it is about that answer); what it said about a served stored answer stays on the audit event
    (`DedupEvent.suspected_false_hit`), which outlives the conversation."""

    turn = models.OneToOneField(Turn, on_delete=models.CASCADE, related_name="feedback")
    # The turn's conversation, kept on the row so a conversation's feedback is one indexed filter.
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="feedback")
    rating = models.CharField(max_length=4, choices=FeedbackRating.choices)
    comment = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "-id"]
        verbose_name_plural = "feedback"
        indexes = [
            models.Index(fields=["tenant", "updated_at"], name="feedback_tenant_updated"),
            models.Index(fields=["tenant", "rating", "updated_at"], name="feedback_tenant_rating"),
        ]

    def __str__(self) -> str:
        return f"{self.rating} on turn {self.turn_id}"


class LabelSource(models.TextChoices):
    SUPPORT = "support", "Support's verdict"
    END_USER = "end_user", "End user's thumbs-down (suspected until support confirms)"
    IMPORT = "import", "Imported"


class DuplicateLabel(TenantOwnedModel):
    """Whether two questions are duplicates, said by a person, kept with who said it: what a tenant's trained
    verifier learns from (`selectors.duplicate_labels_training`).

    The two texts are copied when the label is given, so a label outlives the turns (and the audit event) it was
    taken from. A label of an audit event is one per (event, source), changed when given again; an imported label
    has no event. Written only by `conversations.review.labels`."""

    dedup_event = models.ForeignKey(
        DedupEvent, on_delete=models.SET_NULL, null=True, blank=True, related_name="duplicate_labels"
    )
    question = models.TextField(help_text="The new question the decision was about.")
    stored_question = models.TextField(help_text="The stored question it was compared with.")
    is_duplicate = models.BooleanField()
    source = models.CharField(max_length=8, choices=LabelSource.choices)
    # A user name (support), an API key's prefix (support tooling), "thumbs-down" (end user), or an import's name.
    given_by = models.CharField(max_length=255, blank=True, default="")
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["dedup_event", "source"],
                condition=models.Q(dedup_event__isnull=False),
                name="duplicate_label_one_per_event_source",
            )
        ]
        indexes = [models.Index(fields=["tenant", "source"], name="duplicate_label_tenant_source")]

    def __str__(self) -> str:
        return f"{'duplicate' if self.is_duplicate else 'not duplicate'} ({self.source})"


class ReviewPick(TenantOwnedModel):
    """A decision the review queue picked for one tenant's day (`conversations.review.review_queue_rules`): written
    once, when the day's queue is first opened, so reloading the page shows the same picks and the day's quota is not
    drawn again. An event is picked once ever."""

    day = models.DateField()
    dedup_event = models.ForeignKey(DedupEvent, on_delete=models.CASCADE, related_name="review_picks")
    reason = models.CharField(max_length=16)
    rank = models.PositiveIntegerField()
    # The chance the day's draw had of picking the event, given its candidates: 1 for a rule's pick, k / M for one of
    # the random share (what weighs it as a sample of the traffic); null for picks drawn before it was recorded.
    inclusion_probability = models.FloatField(null=True, blank=True)
    picked_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["day", "rank"]
        constraints = [models.UniqueConstraint(fields=["tenant", "dedup_event"], name="review_pick_once_per_event")]
        indexes = [models.Index(fields=["tenant", "day", "rank"], name="review_pick_tenant_day")]

    def __str__(self) -> str:
        return f"{self.day} #{self.rank} ({self.reason})"


class DedupDayFigures(TenantOwnedModel):
    """The dashboard's counts and sums of one tenant's audit events for one whole local day (in `time_zone`, the
    site's when written), so the dashboard reads one row per past day instead of every event.

    Written by the `conversations.dedup_figures_rollup` task once the day is over. Review verdicts are left out (they
    change; the dashboard reads reviewed events one by one), and events are never edited otherwise nor deleted but
    with their tenant, so a day's row never goes stale. A row of another time zone is not used (and is rewritten)."""

    day = models.DateField()
    time_zone = models.CharField(max_length=64)
    # [[action, shadow, relaxed, events, excluded_count sum, tokens_saved sum, ms_saved sum], ...]
    groups = models.JSONField(default=list)
    # [[action, similarity bin, events], ...] for the events that had a nearest match
    histogram = models.JSONField(default=list)
    events = models.PositiveIntegerField(default=0)
    computed_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "day"], name="dedup_day_figures_unique_day")]

    def __str__(self) -> str:
        return f"{self.day} ({self.events} events)"


class SettingsChange(TenantOwnedModel):
    """The settings history: one row per changed field of the tenant's dedup policy or of one of its intents,
    saying who changed it, when, and from what to what. Written only by `conversations.admin.services`; rows
    are never edited, and outlive the user who made the change (`changed_by_label` keeps their name)."""

    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    changed_by_label = models.CharField(max_length=255, blank=True, default="")
    changed_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # "policy", or "intent:<name>" for an intent's behaviour, examples, creation or deletion.
    subject = models.CharField(max_length=80)
    field = models.CharField(max_length=64)
    old_value = models.JSONField(null=True, blank=True)
    new_value = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-changed_at", "-id"]
        indexes = [models.Index(fields=["tenant", "changed_at"], name="settingschange_tenant_at")]

    def __str__(self) -> str:
        return f"{self.subject}.{self.field} changed by {self.changed_by_label or 'unknown'}"


class DuplicateModelStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    TRAINING = "training", "Training"
    CANDIDATE = "candidate", "Candidate (trained, not active)"
    SHADOW = "shadow", "Shadow (decides beside the active one, never applied)"
    ACTIVE = "active", "Active (decides the turns of its model's knowledge bases)"
    RETIRED = "retired", "Retired (was active)"
    FAILED = "failed", "Failed"


class DuplicateModelVersion(TenantOwnedModel):
    """One trained duplicate verifier of one tenant, from that tenant's own labels only, in the space of one
    embedding model. Its file lives under settings.DUPLICATE_MODEL_DIR at a path derived from the tenant and version
    (`verifiers.verifier_path`), so no row can point a tenant at another tenant's file. At most one version of a tenant
    and embedding model is active and one in shadow: an English and a Chinese knowledge base on two models each learn
    from their own traffic at once. With none active for a model, its shipped head decides. Written only by
    `conversations.training.verifiers`."""

    version = models.PositiveIntegerField()
    # The embedding model (by name) whose vectors it reads: it decides the conversations of that model's knowledge
    # bases only, and learns from their labels.
    embedding_model = models.CharField(max_length=200)
    status = models.CharField(max_length=10, choices=DuplicateModelStatus.choices, default=DuplicateModelStatus.QUEUED)
    progress = models.FloatField(default=0.0, help_text="0 to 1, while training.")
    stage = models.CharField(max_length=80, blank=True, default="")
    # Where the labels came from: "reviews" (the tenant's reviewed decisions) or the pairs file a command named.
    source = models.CharField(max_length=255, default="reviews")
    label_count = models.PositiveIntegerField(default=0)
    training_set_sha256 = models.CharField(max_length=64, blank=True, default="")
    # Held-out figures of this model and of the decision that was active when it was trained, its cut and penalty.
    figures = models.JSONField(default=dict, blank=True)
    decision_note = models.CharField(max_length=300, blank=True, default="")
    error = models.TextField(blank=True, default="")
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    started_by_label = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-version"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "version"], name="duplicate_model_unique_version"),
            models.UniqueConstraint(
                fields=["tenant", "embedding_model"],
                condition=models.Q(status="active"),
                name="duplicate_model_one_active_per_model",
            ),
            models.UniqueConstraint(
                fields=["tenant", "embedding_model"],
                condition=models.Q(status="shadow"),
                name="duplicate_model_one_shadow_per_model",
            ),
        ]

    def __str__(self) -> str:
        return f"verifier v{self.version} of {self.embedding_model} ({self.status})"


class CuratedAnswer(TenantOwnedModel):
    """An answer the business stands behind, in one knowledge base, with the phrasings (`CuratedPhrasing`) it answers.
    A turn's duplicate decision considers the enabled ones before the user's own history; a disabled one is never
    served, from the next turn on. Its citations (`source_chunks`: chunk id -> content hash when cited) are checked
    as a stored answer's are: a cited chunk since changed, disabled or deleted means it is not served."""

    knowledge_base = models.ForeignKey(
        "retrieval.KnowledgeBase", on_delete=models.CASCADE, related_name="curated_answers"
    )
    answer = models.TextField()
    enabled = models.BooleanField(default=True)
    # Null, not "": several curated answers without one share no value the unique constraint would refuse.
    external_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    source_chunks = models.JSONField(default=dict, blank=True)
    source_chunk_ids = models.JSONField(default=list, blank=True)
    # Raised by every write (`services.curated`): how many times it was changed, for the admin and the API's readers.
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["knowledge_base_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["knowledge_base", "external_id"], name="curated_answer_unique_external_id")
        ]
        indexes = [models.Index(fields=["tenant", "knowledge_base", "enabled"], name="curated_tenant_kb_enabled")]

    def __str__(self) -> str:
        return self.answer[:60]


class CuratedPhrasing(TenantOwnedModel):
    """One question a curated answer answers, embedded with its knowledge base's model (`vector_model` names it)."""

    curated_answer = models.ForeignKey(CuratedAnswer, on_delete=models.CASCADE, related_name="phrasings")
    question = models.TextField()
    vector = models.BinaryField(help_text="float32 little-endian, L2-normalised")
    vector_model = models.CharField(max_length=16, blank=True, default="")

    class Meta:
        ordering = ["curated_answer_id", "id"]

    def __str__(self) -> str:
        return self.question[:60]
