"""Pure decisions of the turn pipeline: no database, no Redis, no model but one. Everything here takes plain values
and returns plain values, so every rule is tested directly and read in one place. The one model: where the deployment
switches pair readers on (KB_PAIR_READER), a shipped head with one (`pair_reader`, the bundled model's) has the reader
score the pairs it judges, so its decision reads the two questions' words together as well as their vectors
(`decision_probability`).

- what a turn does given its intent, the policy and the client's flags (`turn_plan`);
- which consumed ids the next search leaves out (`excluded_ids`) and when that exclusion relaxes;
- the intent of a question (`intent_classify`: rules for a Chinese question's built-in intents, then the nearest
  example vector);
- whether a stored QA pair may answer a new question (`duplicate_decide`): cosine at or above the threshold is
  necessary, never sufficient. The pair must not conflict on numbers or negation (`question_pairs.questions_conflict`),
  the duplicate head of the embedding model in use (a logistic regression on `pair_features.pair_features` /
  `pair_probability`, with its pair reader when it has one, `decision_probability`; weights in
  conversations/dedup/duplicate_model.json for the bundled model and duplicate_model.use-multilingual-v3.json for
  the multilingual one) must call it a duplicate, a context-dependent
  follow-up must share its context (`followup_context_matches`), and the stored answer's sources must be unchanged
  (checked by the caller against the database). The heads' weights are the only thing read from disk, once per
  process, by `conversations.dedup.duplicate_model`; pass `pair_model=` to decide with another.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, NamedTuple

import numpy as np

from conversations.dedup.chinese_text import reads_as_chinese
from conversations.dedup.duplicate_model import PairModel, pair_model_default, pair_probability, regression_probability
from conversations.dedup.intent_rules import english_intent_by_rules, intent_by_rules
from conversations.dedup.other_languages import reads_as_japanese
from conversations.dedup.pair_features import pair_features
from conversations.dedup.pair_reader import combined_probability, reader_score
from conversations.dedup.question_pairs import question_is_context_dependent, questions_conflict

INTENT_OTHER = "other"
# Nearest example at or above this cosine names the intent; chosen so that ordinary questions ("how do I reset my
# password") stay `other` while the short formulaic phrases the built-ins cover are recognised.
INTENT_FLOOR = 0.80
# The built-in intents' shipped phrasings in the multilingual model's other languages (`IntentExamples.phrases`) name
# their intent at or above this cosine: the lowest at which, leaving each phrasing out in turn, the others name it an
# intent not its own least often (docs/conversations.md, "Intents in the model's other languages").
PHRASE_FLOOR = 0.75

# --- plan of a turn ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyView:
    """The policy fields a decision reads (a plain copy of DedupPolicy). Its fields are the policy's settings, in the
    order the admin's settings page and its history show them: `POLICY_FIELDS` is the one list of them."""

    scope: str = "session"
    threshold: float = 0.76  # conversations.models.DEFAULT_THRESHOLD
    question_window: int = 10
    exclusion_enabled: bool = True
    exclusion_window: int = 5
    granularity: str = "chunk"
    min_results: int = 3
    ttl_seconds: int = 86400
    shadow_mode: bool = False
    allowlisted_intents: tuple[str, ...] = (INTENT_OTHER,)
    precision_target: float = 0.90  # conversations.models.DEFAULT_PRECISION_TARGET
    rewrite_followups: bool = False


# The settings of a tenant's dedup policy (what the API, the admin and `dedup_policy_update` may change).
POLICY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PolicyView))


@dataclass(frozen=True)
class TurnPlan:
    smalltalk: bool  # no retrieval, no dedup
    check_duplicates: bool  # look for a stored answer (decided, even in shadow mode)
    exclusion: bool  # leave out consumed ids (decided, even in shadow mode)
    bypass_reason: str  # why question dedup was skipped on purpose ("" when it was not)


def turn_plan(*, policy: PolicyView, intent: str, behaviour: str, force_refresh: bool) -> TurnPlan:
    """What this turn does. Small talk never dedups nor retrieves; `repeat` re-shows (exclusion off, no stored
    answer: the user asked to see the passages again); `elaborate` and `force_refresh` skip question dedup; an
    intent off the allowlist is not deduplicated; scope `off` never looks."""
    if behaviour == "smalltalk":
        return TurnPlan(smalltalk=True, check_duplicates=False, exclusion=False, bypass_reason="")
    exclusion = policy.exclusion_enabled and behaviour != "repeat"
    bypass_reason = ""
    if force_refresh:
        bypass_reason = "force_refresh"
    elif behaviour in ("elaborate", "repeat"):
        bypass_reason = f"intent {intent}"
    elif policy.scope == "off":
        bypass_reason = ""
    elif intent not in policy.allowlisted_intents:
        bypass_reason = f"intent {intent} not allowlisted"
    check = policy.scope != "off" and not bypass_reason
    return TurnPlan(smalltalk=False, check_duplicates=check, exclusion=exclusion, bypass_reason=bypass_reason)


# --- exclusion window ----------------------------------------------------------------------------------------


class ConsumedRef(NamedTuple):
    # A named tuple rather than a frozen dataclass: the hot copy decodes up to ~1,000 of these on every turn, and a
    # frozen dataclass costs about a microsecond each to build (bench/state_codec.py).
    kind: str  # "doc" | "chunk"
    item_id: int
    turn_number: int


def window_first_turn(*, next_turn_number: int, window: int) -> int:
    """First turn number inside the exclusion window of turn `next_turn_number`: the `window` turns before it."""
    if window < 1:
        raise ValueError("window must be at least 1")
    return max(1, next_turn_number - window)


def excluded_ids(*, consumed: Iterable[ConsumedRef], granularity: str, next_turn_number: int, window: int) -> list[int]:
    """Ids (of the policy's granularity) shown in the last `window` turns, sorted, without repeats."""
    first = window_first_turn(next_turn_number=next_turn_number, window=window)
    return sorted(
        {ref.item_id for ref in consumed if ref.kind == granularity and first <= ref.turn_number < next_turn_number}
    )


def exclusion_relaxes(*, result_count: int, min_results: int, wanted: int) -> bool:
    """Exclusion is dropped for the turn when it leaves fewer than `min_results` (never more than `wanted`)."""
    return result_count < min(min_results, wanted)


def relaxed_merge(
    *, excluded_results: Sequence, full_results: Sequence, key: Callable[[Any], Hashable], limit: int
) -> list:
    """Relaxed turn: the novel results first (they are what the user has not seen), then the best already-seen
    ones to fill up to `limit`. Relaxing never drops a novel result the exclusion search found."""
    merged = list(excluded_results)
    seen = {key(result) for result in merged}
    for result in full_results:
        if len(merged) >= limit:
            break
        if key(result) not in seen:
            merged.append(result)
            seen.add(key(result))
    return merged[:limit]


# --- intents --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IntentExamples:
    name: str
    behaviour: str
    vectors: np.ndarray  # (n, d), normalised: the tenant's examples
    # The built-in intent's phrasings in the embedding model's other languages (`builtins.MULTILINGUAL_PHRASES`),
    # compared at PHRASE_FLOOR with the questions that read them (`_reads_phrases`); None when the model has none.
    phrases: np.ndarray | None = None


def _reads_phrases(question: str) -> bool:
    """Whether the shipped phrasings are compared with `question`: not when it reads as Chinese, which the rules read
    (`intent_rules`) and whose characters only look like other languages' phrasings across the model's languages
    ("再次致电", "call again", sits 0.77 from an Arabic "say it again")."""
    return not reads_as_chinese(question) or reads_as_japanese(question)


def _nearest_intent(
    *, question: str | None, question_vector: np.ndarray, intents: Sequence[IntentExamples], floor: float
) -> tuple[IntentExamples | None, float]:
    """(the intent of the example or phrasing nearest the question when that one reaches its floor, else None; its
    cosine). The tenant's examples reach at `floor`; the shipped phrasings at PHRASE_FLOOR and are compared only with
    a `question` that reads them (none when the text is not given)."""
    nearest: IntentExamples | None = None
    nearest_score, nearest_reach = -1.0, floor
    phrases_read = question is not None and _reads_phrases(question)
    for intent in intents:
        for vectors, reach in ((intent.vectors, floor), (intent.phrases if phrases_read else None, PHRASE_FLOOR)):
            if vectors is None or len(vectors) == 0 or vectors.shape[-1] != question_vector.shape[-1]:
                continue
            score = float(np.max(vectors @ question_vector))
            if score > nearest_score:
                nearest, nearest_score, nearest_reach = intent, score, reach
    return (nearest if nearest_score >= nearest_reach else None), nearest_score


def intent_by_tenant_rules(*, question: str, intents: Sequence[IntentExamples]) -> tuple[str, str] | None:
    """(intent name, behaviour) of a question whose whole text is a formula of a built-in intent, as the tenant has
    that intent: its behaviour is the tenant's (an admin may have changed it), and a tenant without it gets None.
    Chinese by `intent_rules.intent_by_rules` ("你好", "谢谢", "再说一遍", "详细解释一下"), other text by the English
    chat formulas of `intent_rules.english_intent_by_rules` ("thx", "say again?", "eli5"); every other English
    message is the nearest example's."""
    if reads_as_chinese(question):
        ruled = intent_by_rules(question)
    else:
        ruled = english_intent_by_rules(question)
    if ruled is None:
        return None
    return next(((i.name, i.behaviour) for i in intents if i.name == ruled[0]), None)


def intent_classify(
    *, question: str, question_vector: np.ndarray, intents: Sequence[IntentExamples], floor: float = INTENT_FLOOR
) -> tuple[str, str, float]:
    """(intent name, behaviour, similarity) of the intent `intent_by_tenant_rules` gives a question by rule
    (similarity 1.0), else of the nearest example at or above `floor` or shipped phrasing at or above PHRASE_FLOOR
    (`_nearest_intent`), else `other`."""
    ruled = intent_by_tenant_rules(question=question, intents=intents)
    if ruled is not None:
        return ruled[0], ruled[1], 1.0
    named, score = _nearest_intent(question=question, question_vector=question_vector, intents=intents, floor=floor)
    if named is not None:
        return named.name, named.behaviour, score
    return INTENT_OTHER, "normal", max(score, 0.0)


# Behaviours of intents that name no topic of their own: small talk, and "show me that again" / "explain in more
# detail", which are about the question before them.
TOPICLESS_BEHAVIOURS = frozenset({"smalltalk", "repeat", "elaborate"})


def names_topic(
    *,
    vectors: Sequence[np.ndarray],
    intents: Sequence[IntentExamples],
    floor: float = INTENT_FLOOR,
    comparable: Sequence[bool] | None = None,
    questions: Sequence[str] | None = None,
) -> list[bool]:
    """For each question vector, whether that question is about something of its own: False when its intent (by
    `intent_classify`'s rule) has a behaviour in TOPICLESS_BEHAVIOURS. `questions`, when given, are the questions'
    texts, one per vector: one a rule recognises (`intent_by_tenant_rules`) is decided by it, whatever its
    vector. Otherwise a vector made by another model than the intents' (asked before a model change: `comparable`
    False, or another size) cannot be classified and counts as naming one."""
    flags = [True] * len(vectors)
    ruled = [False] * len(vectors)
    if questions is not None and len(questions) != len(vectors):
        raise ValueError("names_topic takes one question per vector")
    for index, question in enumerate(questions or ()):
        by_rule = intent_by_tenant_rules(question=question, intents=intents)
        if by_rule is not None:
            flags[index], ruled[index] = by_rule[1] not in TOPICLESS_BEHAVIOURS, True
    usable = [intent for intent in intents if intent.vectors is not None and len(intent.vectors)]
    if not usable or not flags:
        return flags
    dimension = usable[0].vectors.shape[-1]
    examples, topicless = _examples_matrix([(i.vectors, i.behaviour) for i in usable], dimension)
    phrases, phrase_topicless = _examples_matrix([(i.phrases, i.behaviour) for i in intents], dimension)
    for index, vector in enumerate(vectors):
        if ruled[index] or np.shape(vector) != (dimension,) or (comparable is not None and not comparable[index]):
            continue
        # One matrix-vector product per question, not one matrix product for all: OpenBLAS runs a matrix product
        # on a thread per core that then spins beside the database, where the vector products stay on the calling
        # thread. The nearest example or phrasing decides, as in `_nearest_intent`.
        scores = examples @ vector
        example = int(np.argmax(scores))
        reached, nearest_topicless = scores[example] >= floor, topicless[example]
        if len(phrases) and questions is not None and _reads_phrases(questions[index]):
            phrase_scores = phrases @ vector
            phrase = int(np.argmax(phrase_scores))
            if phrase_scores[phrase] > scores[example]:
                reached, nearest_topicless = phrase_scores[phrase] >= PHRASE_FLOOR, phrase_topicless[phrase]
        flags[index] = not (reached and nearest_topicless)
    return flags


def _examples_matrix(rows: Sequence[tuple[np.ndarray | None, str]], dimension: int) -> tuple[np.ndarray, np.ndarray]:
    """The vectors of `rows` ((vectors, behaviour) per intent) of size `dimension` as one matrix, and per row whether
    its behaviour names no topic."""
    usable = [(v, b) for v, b in rows if v is not None and len(v) and v.shape[-1] == dimension]
    if not usable:
        return np.zeros((0, dimension)), np.zeros(0, dtype=bool)
    return (
        np.concatenate([v for v, _ in usable]),
        np.concatenate([np.full(len(v), b in TOPICLESS_BEHAVIOURS) for v, b in usable]),
    )


# --- the decision's gates and reasons ----------------------------------------------------------------------

# The follow-up guard's context match never gets looser than this, whatever the tenant's gate: the guard was built
# and measured at a threshold of 0.90, and the duplicate head (which lets the gate sit lower) never sees the
# previous questions, only their vectors.
FOLLOWUP_CONTEXT_FLOOR = 0.90
# Without a duplicate head for the embedding model in use (a tenant deployment with another model), cosine is the
# whole decision, and the gate never sits below what plain cosine was measured to need on QQP for the bundled model.
HEADLESS_THRESHOLD_FLOOR = 0.90
# The reason of a miss whose every stored question in scope was embedded by another model than the one in use.
OTHER_MODEL_REASON = "stored questions of another embedding model"
# The reason a close match is refused when its answer was made from a partial index (a re-index running): what that
# search could not find is not in the answer, so the question is answered afresh.
PARTIAL_INDEX_REASON = "answered from a partial index"


# The reason of a miss whose question the embedding model cannot read (`retrieval.embeddings.text_readable`): its
# cosine with any stored question means nothing, so only an exact repeat may be served.
UNREADABLE_REASON = "the embedding model cannot read the question: only an exact repeat is served"
# The reason a stored answer is served to such a question: it is the same question, word for word once normalised.
UNREADABLE_REPEAT_REASON = "exact repeat of a question the embedding model cannot read"
# The refusal of a stored answer that cites no source (`StoredQuestion.cites`, `turn_decision.MatchRefusal.NO_SOURCE`).
NO_SOURCE_REASON = "answer cites no source"


# --- duplicate decision -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredQuestion:
    """A QA pair that might answer the new question."""

    turn_id: int
    question: str
    vector: np.ndarray
    conversation_id: int
    # Vector of the question asked just before it in its conversation (None for a first turn).
    previous_vector: np.ndarray | None = None
    answerable: bool = True  # has a stored answer
    # Its answer cites a passage or is a curated answer's (`state.turn_cites`): one citing none ("nothing found", small
    # talk, a model saying the passages do not hold the answer) is never served, and the next candidate is looked at.
    cites: bool = True
    # Its answer was made from a partial index (`Turn.partial_index`): never served, whatever the similarity.
    partial_index: bool = False
    # The embedding model that made `vector` (`retrieval.embeddings.model_id`; "" when not recorded). Read only when
    # `duplicate_decide` is told the question's model (`vector_model`); None, not said, then counts as another model.
    vector_model: str | None = None
    # It is the question asked just before the new one, in the new one's conversation: the new question's own
    # context (`followup_context_matches`).
    asked_just_before: bool = False
    # The embedding model reads its text (`retrieval.embeddings.text_readable`): when not, its vector is compared
    # with nothing, and it answers only an exact repeat of itself.
    readable: bool = True


@dataclass(frozen=True)
class DuplicateDecision:
    hit: bool
    turn_id: int | None = None
    similarity: float | None = None
    reason: str = ""
    refused: list[tuple[int, str]] = field(default_factory=list)
    # For the served pair, or on a miss for the nearest match: the duplicate head's probability (None when the head
    # was not asked), and whether that pair passed every check but the cosine gate (None: no candidate).
    probability: float | None = None
    passes_checks: bool | None = None
    # The cosine gate the decision applied: the threshold asked for, raised to HEADLESS_THRESHOLD_FLOOR when it ran
    # without the head (None: no candidate was compared).
    gate: float | None = None
    # A stored question at or above the gate was found and not served: a check refused it (`refused`), or its
    # answer could not be served once loaded (`turn_decision.match_refusal`).
    close_match_refused: bool = False
    # The verifier that decided (`Verifier`: version None is the shipped head), and, when a candidate ran in shadow
    # beside it, what that one decided on the same candidates (never applied).
    verifier_version_id: int | None = None
    verifier_label: str = ""
    shadow: ShadowVerdict | None = None


@dataclass(frozen=True)
class ShadowVerdict:
    """What a verifier in shadow decided for a turn: hit or not, on which stored question, with what probability."""

    verifier_version_id: int
    hit: bool
    turn_id: int | None
    probability: float | None
    passes_checks: bool | None  # as `DuplicateDecision.passes_checks`: every check but the gate, by this verifier


SHIPPED_VERIFIER_LABEL = "shipped head"


@dataclass(frozen=True)
class Verifier:
    """A duplicate head with the version that names it in the audit log: `version_id` None and `model` None are the
    shipped head (conversations/dedup/duplicate_model.json)."""

    version_id: int | None = None
    label: str = SHIPPED_VERIFIER_LABEL
    model: PairModel | None = None


@dataclass(frozen=True)
class TenantVerifiers:
    """What decides a tenant's turns: the active verifier (the shipped head when none is), and a candidate in shadow."""

    active: Verifier = field(default_factory=Verifier)
    shadow: Verifier | None = None


def followup_context(
    *, previous_vector: np.ndarray | None, previous_names_topic: bool, previous_comparable: bool = True
) -> np.ndarray | None:
    """The context the follow-up guard reads a question in: the vector of the question asked just before it (None
    for a first turn). When that question named no topic of its own (small talk, "show me that again"), the topic
    lies further back and is not known here: the context is then a zero vector, alike to no other, so the guard
    refuses every pair that needs it ("and for admins?" after "thanks" is about whatever came before the thanks).
    So it is when that vector was made by another embedding model than the one in use (`previous_comparable`
    False, see `vectors_comparable`): it says nothing in this model's space."""
    if previous_vector is None or (previous_names_topic and previous_comparable):
        return previous_vector
    return np.zeros_like(previous_vector)


def vectors_comparable(*, stored_model: str | None, current_model: str) -> bool:
    """Whether a stored vector may be compared with a vector of `current_model`: only when the same model made it.
    Two models of one size give cosines that look like any other and mean nothing, so a vector of another model, or
    of one not recorded ("": stored before model ids were kept), is never compared."""
    return bool(stored_model) and stored_model == current_model


def followup_context_matches(
    *,
    question: str,
    previous_vector: np.ndarray | None,
    candidate: StoredQuestion,
    threshold: float,
) -> bool:
    """A context-dependent question (or stored question) matches only when both were asked right after
    questions whose vectors are at least `threshold` alike (the decision passes its gate, never below
    FOLLOWUP_CONTEXT_FLOOR): "and for admins?" after "pricing?" is not "and for admins?" after "API limits?". A
    first turn has no context, so it matches only another first turn. A candidate asked just before the question, in
    its conversation (`asked_just_before`), is the question's own context, whatever context it had itself: "I forgot
    my password, what now?" right after "How do I reset my password?" is read about that very question, so the guard
    has nothing to refuse and the pair is judged on its own (gate, conflicts, head)."""
    if not (question_is_context_dependent(question) or question_is_context_dependent(candidate.question)):
        return True
    if candidate.asked_just_before:
        return True
    if previous_vector is None or candidate.previous_vector is None:
        return previous_vector is None and candidate.previous_vector is None
    if previous_vector.shape != candidate.previous_vector.shape:
        # One of the two was asked before a model change: their contexts cannot be compared, so they do not match.
        return False
    return float(previous_vector @ candidate.previous_vector) >= threshold


def head_applies(
    *, use_head: bool, embedding_model: str | None, dimension: int | None = None, pair_model: PairModel | None = None
) -> bool:
    """Whether the duplicate head scores the pairs: it is switched on (`use_head`, the operator's KB_DUPLICATE_HEAD)
    and was trained on `embedding_model` (None: the head's own) and, when `dimension` is given, for vectors of that
    size. The head is `pair_model`, else the shipped head of `embedding_model` (`pair_model_default`), which a model
    without a head of its own does not have. Without it the decision's cosine gate is raised (`cosine_gate`)."""
    model = pair_model if pair_model is not None else pair_model_default(embedding_model)
    return (
        use_head
        and (dimension is None or model.dimension == dimension)
        and (embedding_model is None or embedding_model == model.meta.get("embedding_model"))
    )


def cosine_gate_floor(*, use_head: bool, embedding_model: str | None, dimension: int | None = None) -> float | None:
    """The lowest cosine gate `duplicate_decide` can apply: HEADLESS_THRESHOLD_FLOOR when the duplicate head does not
    score the pairs, else None (the policy's threshold, however low). The dashboard's what-if table lists no
    threshold under it, as no decision would serve there."""
    headless = not head_applies(use_head=use_head, embedding_model=embedding_model, dimension=dimension)
    return HEADLESS_THRESHOLD_FLOOR if headless else None


def cosine_gate(
    *, threshold: float, use_head: bool, embedding_model: str | None, dimension: int | None = None
) -> float:
    """The cosine gate `duplicate_decide` applies for a policy's `threshold`: the threshold itself when the duplicate
    head scores the pairs, else at least HEADLESS_THRESHOLD_FLOOR. What the dashboard shows as the current threshold,
    so its histogram line and what-if row are the gate the decisions were taken at."""
    floor = cosine_gate_floor(use_head=use_head, embedding_model=embedding_model, dimension=dimension)
    return threshold if floor is None else max(threshold, floor)


def _comparable(
    candidates: Sequence[StoredQuestion], *, question_vector: np.ndarray, vector_model: str | None
) -> list[StoredQuestion]:
    """The candidates whose vectors can be compared with `question_vector`: of its size and, when `vector_model`
    names the model that made it, made by that model (`vectors_comparable`)."""
    return [
        c
        for c in candidates
        if c.vector.shape == question_vector.shape
        and (vector_model is None or vectors_comparable(stored_model=c.vector_model, current_model=vector_model))
    ]


def _head_and_gate(
    *, pair_model: PairModel | None, embedding_model: str | None, use_head: bool, dimension: int, threshold: float
) -> tuple[PairModel | None, float]:
    """The head that scores the pairs (None: none can) and the cosine gate the decision applies: the policy's
    `threshold`, raised to HEADLESS_THRESHOLD_FLOOR without a head, lowered to the head's own gate when it has one (a
    tenant's verifier that chose it from the tenant's labels: under the policy's threshold it was judged to keep the
    precision target, `verifier_training`)."""
    model = pair_model if pair_model is not None else pair_model_default(embedding_model)
    if not head_applies(use_head=use_head, embedding_model=embedding_model, dimension=dimension, pair_model=model):
        return None, max(threshold, HEADLESS_THRESHOLD_FLOOR)
    return model, threshold if model.gate is None else min(threshold, model.gate)


def duplicate_decide(
    *,
    question: str,
    question_vector: np.ndarray,
    previous_vector: np.ndarray | None,
    candidates: Sequence[StoredQuestion],
    threshold: float,
    pair_model: PairModel | None = None,
    embedding_model: str | None = None,
    use_head: bool = True,
    vector_model: str | None = None,
    question_readable: bool = True,
) -> DuplicateDecision:
    """The best candidate (by cosine) at or above the gate that also passes, in this order: it has a stored answer,
    made from a complete index; the questions do not conflict (`questions_conflict`); the duplicate head calls the
    pair a duplicate (`pair_probability` >= the model's cut); the follow-up guard. Otherwise no hit. Candidates
    refused on a check are reported with the reason (the audit log says why a close match was not served).

    The head and the gate: `_head_and_gate` (`pair_model`, default the shipped head of `embedding_model`; without a
    head that can score the pair, or with `use_head=False`, the gate is raised to HEADLESS_THRESHOLD_FLOOR; a head's
    own gate applies under `threshold`); the decision's `gate` says which applied. Candidates embedded by another
    model are left out (`_comparable`: another vector size, or another `vector_model`, as before a model change);
    when that leaves none, the miss says so in its reason. A question the model cannot read (`question_readable`
    False) is decided by `unreadable_decide` alone; a stored question it cannot read is never compared with a
    readable one by similarity."""
    if not question_readable:
        return unreadable_decide(question=question, previous_vector=previous_vector, candidates=candidates)
    candidates = [c for c in candidates if c.readable]
    comparable = _comparable(candidates, question_vector=question_vector, vector_model=vector_model)
    if not comparable:
        return DuplicateDecision(hit=False, reason=OTHER_MODEL_REASON if candidates else "")
    candidates = comparable
    model, threshold = _head_and_gate(
        pair_model=pair_model,
        embedding_model=embedding_model,
        use_head=use_head,
        dimension=question_vector.shape[0],
        threshold=threshold,
    )
    matrix = np.stack([c.vector for c in candidates])
    # Unit vectors: float32 rounding can take a vector's cosine with itself to 1.0000001, which is no cosine.
    scores = np.clip(matrix @ question_vector, -1.0, 1.0)
    order = np.argsort(-scores, kind="stable")
    refused: list[tuple[int, str]] = []
    top = candidates[order[0]]
    best_score = float(scores[order[0]])
    top_checks: tuple[str, float | None] | None = None

    def refusal_of(candidate: StoredQuestion, context_threshold: float) -> tuple[str, float | None]:
        return _candidate_refusal(
            question=question,
            question_vector=question_vector,
            previous_vector=previous_vector,
            candidate=candidate,
            model=model,
            context_threshold=context_threshold,
        )

    for index in order:
        score = float(scores[index])
        if score < threshold:
            break
        candidate = candidates[index]
        refusal, probability = refusal_of(candidate, max(threshold, FOLLOWUP_CONTEXT_FLOOR))
        if candidate is top:
            top_checks = (refusal, probability)
        if refusal:
            refused.append((candidate.turn_id, refusal))
            continue
        return DuplicateDecision(
            hit=True,
            turn_id=candidate.turn_id,
            similarity=score,
            refused=refused,
            probability=probability,
            passes_checks=True,
            gate=threshold,
        )
    if top_checks is None:
        # The nearest match is below the gate: run the other checks on it anyway (well under a millisecond), so the
        # audit log says whether a lower gate would have served it (the dashboard's threshold what-if).
        top_checks = refusal_of(top, FOLLOWUP_CONTEXT_FLOOR)
    reason = refused[0][1] if refused else "below threshold"
    return DuplicateDecision(
        hit=False,
        turn_id=top.turn_id,
        similarity=best_score,
        reason=reason,
        refused=refused,
        probability=top_checks[1],
        passes_checks=not top_checks[0],
        gate=threshold,
        close_match_refused=bool(refused),
    )


def question_normalised(text: str) -> str:
    """What two questions must share, character for character, to be one question asked again: the text in
    compatibility form (full-width forms and their ASCII twins alike), case folded, without punctuation and symbols,
    its spaces collapsed. "怎么重置密码？" and "怎么重置密码?" are one; "怎么重置密码" and "怎么修改密码" are not."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    kept = "".join(" " if unicodedata.category(char)[0] in "PSZC" else char for char in folded)
    return " ".join(kept.split())


def unreadable_decide(
    *, question: str, previous_vector: np.ndarray | None, candidates: Sequence[StoredQuestion]
) -> DuplicateDecision:
    """The decision for a question the embedding model cannot read: its vector says nothing of its meaning, so no
    similarity is compared, no head scores it and nothing of it is recorded as a similarity (the what-if table and the
    review queue's similarity picks leave it out). Only a stored question equal to it once normalised
    (`question_normalised`) with a stored answer from a complete index may answer it, and one that leans on its
    context only when that context is known to be the same: it was asked just before, or both were first turns (the
    vectors of the contexts cannot tell one context from another either)."""
    wanted = question_normalised(question)
    context_dependent = question_is_context_dependent(question)
    for candidate in reversed(candidates):  # the latest asking first: its answer is the freshest
        servable = candidate.answerable and candidate.cites and not candidate.partial_index
        if question_normalised(candidate.question) != wanted or not servable:
            continue
        same_context = candidate.asked_just_before or (previous_vector is None and candidate.previous_vector is None)
        if context_dependent and not same_context:
            continue
        return DuplicateDecision(hit=True, turn_id=candidate.turn_id, reason=UNREADABLE_REPEAT_REASON)
    return DuplicateDecision(hit=False, reason=UNREADABLE_REASON)


def verifier_reads(*, verifier: Verifier, embedding_model: str | None, dimension: int) -> bool:
    """Whether `verifier` may decide for questions of `embedding_model` (by name) whose vectors have `dimension`
    values: the shipped head always may (the decision takes that model's own, `pair_model_default`); a tenant's
    trained one only when it was trained on that model's vectors of that size (its file names the model)."""
    return verifier.model is None or head_applies(
        use_head=True, embedding_model=embedding_model, dimension=dimension, pair_model=verifier.model
    )


def duplicate_decide_verified(
    *, verifier: Verifier, shadow: Verifier | None = None, **decide: Any
) -> DuplicateDecision:
    """`duplicate_decide` (with `decide`'s arguments) by `verifier`, which the decision then names; with `shadow`, the
    same decision by that verifier as well, recorded on the result and never applied. A turn without candidates
    costs the shadow nothing (both return at once).

    A verifier trained on another embedding model's vectors than the question's (`verifier_reads` False: a tenant's
    verifier trained in the bundled model's space, asked for a knowledge base on the multilingual model) never
    decides: the shipped head of the question's model (`embedding_model`) decides and is named instead, and such a
    shadow does not run. Its weights would read another space's coordinates."""
    reads = {"embedding_model": decide.get("embedding_model"), "dimension": int(np.shape(decide["question_vector"])[0])}
    if not verifier_reads(verifier=verifier, **reads):
        verifier = Verifier()
    if shadow is not None and not verifier_reads(verifier=shadow, **reads):
        shadow = None
    decided = duplicate_decide(pair_model=verifier.model, **decide)
    decided = replace(decided, verifier_version_id=verifier.version_id, verifier_label=verifier.label)
    if shadow is None or shadow.version_id is None:
        return decided
    other = duplicate_decide(pair_model=shadow.model, **decide)
    return replace(
        decided,
        shadow=ShadowVerdict(
            verifier_version_id=shadow.version_id,
            hit=other.hit,
            turn_id=other.turn_id,
            probability=other.probability,
            passes_checks=other.passes_checks,
        ),
    )


def decision_probability(
    *, model: PairModel, features: np.ndarray, question: str, stored_question: str
) -> tuple[float, float]:
    """(the probability the decision reads, the cut it is served at): the head's probability and cut, or, for a head
    with a pair reader (`pair_reader`), their combination with the reader's score of the two questions and the
    reader's cut (when the deployment uses readers, `PairModel.active_reader`). The combination reads the head's
    regression, which the reader was fitted beside (for a tree head, the trees' first input: `regression_probability`).
    A reader that cannot run leaves the head alone at its own cut."""
    reader = model.active_reader
    score = None if reader is None else reader_score(reader=reader, question=question, stored=stored_question)
    if score is None:
        return pair_probability(model=model, features=features), model.cut
    regression = regression_probability(model=model, features=features)
    return combined_probability(reader=reader, head_probability=regression, reader_score=score), reader.cut


def _candidate_refusal(
    *,
    question: str,
    question_vector: np.ndarray,
    previous_vector: np.ndarray | None,
    candidate: StoredQuestion,
    model: PairModel | None,
    context_threshold: float,
) -> tuple[str, float | None]:
    """Every check of `duplicate_decide` but the cosine gate, in its order: why the candidate may not answer the
    question ("" when it may), and the duplicate head's probability when the head was asked."""
    if not candidate.answerable:
        return "no stored answer", None
    if candidate.partial_index:
        return PARTIAL_INDEX_REASON, None
    conflict = questions_conflict(question, candidate.question)
    if conflict:
        return conflict, None
    probability = None
    if model is not None:
        features = pair_features(
            first=question,
            second=candidate.question,
            first_vector=question_vector,
            second_vector=candidate.vector,
            feature_version=model.feature_version,
        )
        probability, cut = decision_probability(
            model=model, features=features, question=question, stored_question=candidate.question
        )
        if probability < cut:
            return f"pair model says different (p={probability:.2f})", probability
    if not followup_context_matches(
        question=question, previous_vector=previous_vector, candidate=candidate, threshold=context_threshold
    ):
        return "follow-up in another context", probability
    if not candidate.cites:
        # Last: the question-level reasons say more of the pair, and this one was the refusal after the decision.
        return NO_SOURCE_REASON, probability
    return "", probability
