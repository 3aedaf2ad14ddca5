"""Pure decisions of the turn pipeline: no database, no Redis, no model. Everything here takes plain values and
returns plain values, so every rule is tested directly and read in one place.

- what a turn does given its intent, the policy and the client's flags (`turn_plan`);
- which consumed ids the next search leaves out (`excluded_ids`) and when that exclusion relaxes;
- the intent of a question (`intent_classify`);
- whether a stored QA pair may answer a new question (`duplicate_decide`): cosine at or above the threshold is
  necessary, never sufficient. The pair must not conflict on numbers or negation (`questions_conflict`), the
  duplicate head (a logistic regression on pair features, `pair_features` / `pair_probability`, weights in
  conversations/duplicate_model.json) must call it a duplicate, a context-dependent follow-up must share its
  context (`followup_context_matches`), and the stored answer's sources must be unchanged (checked by the caller
  against the database). The head's weights are the only thing read from disk, once per process, by
  `conversations.duplicate_model`; pass `pair_model=` to decide with another.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from difflib import SequenceMatcher
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from conversations.duplicate_model import PairModel, pair_model_default

INTENT_OTHER = "other"
# Nearest example at or above this cosine names the intent; chosen so that ordinary questions ("how do I reset my
# password") stay `other` while the short formulaic phrases the built-ins cover are recognised.
INTENT_FLOOR = 0.80

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
    vectors: np.ndarray  # (n, d), normalised


def intent_classify(
    *, question_vector: np.ndarray, intents: Sequence[IntentExamples], floor: float = INTENT_FLOOR
) -> tuple[str, str, float]:
    """(intent name, behaviour, similarity) of the nearest example at or above `floor`, else `other`."""
    best_name, best_behaviour, best_score = INTENT_OTHER, "normal", -1.0
    for intent in intents:
        if intent.vectors is None or len(intent.vectors) == 0:
            continue
        score = float(np.max(intent.vectors @ question_vector))
        if score > best_score:
            best_name, best_behaviour, best_score = intent.name, intent.behaviour, score
    if best_score >= floor:
        return best_name, best_behaviour, best_score
    return INTENT_OTHER, "normal", max(best_score, 0.0)


# Behaviours of intents that name no topic of their own: small talk, and "show me that again" / "explain in more
# detail", which are about the question before them.
TOPICLESS_BEHAVIOURS = frozenset({"smalltalk", "repeat", "elaborate"})


def names_topic(
    *,
    vectors: Sequence[np.ndarray],
    intents: Sequence[IntentExamples],
    floor: float = INTENT_FLOOR,
    comparable: Sequence[bool] | None = None,
) -> list[bool]:
    """For each question vector, whether that question is about something of its own: False when its intent (by
    `intent_classify`'s rule) has a behaviour in TOPICLESS_BEHAVIOURS. A vector made by another model than the
    intents' (asked before a model change: `comparable` False, or another size) cannot be classified and counts as
    naming one."""
    flags = [True] * len(vectors)
    usable = [intent for intent in intents if intent.vectors is not None and len(intent.vectors)]
    if not usable or not flags:
        return flags
    dimension = usable[0].vectors.shape[-1]
    usable = [intent for intent in usable if intent.vectors.shape[-1] == dimension]
    examples = np.concatenate([intent.vectors for intent in usable])
    topicless = np.concatenate(
        [np.full(len(intent.vectors), intent.behaviour in TOPICLESS_BEHAVIOURS) for intent in usable]
    )
    for index, vector in enumerate(vectors):
        if np.shape(vector) != (dimension,) or (comparable is not None and not comparable[index]):
            continue
        # One matrix-vector product per question, not one matrix product for all: OpenBLAS runs a matrix product
        # on a thread per core that then spins beside the database, where the vector products stay on the calling
        # thread.
        scores = examples @ vector
        example = int(np.argmax(scores))
        flags[index] = not (scores[example] >= floor and topicless[example])
    return flags


# --- question agreement (beyond cosine) -------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
# A quantity: digits (with thousands or decimal separators) that stand alone or carry a unit or ordinal suffix
# ("5GB", "24h", "3rd"). Digits glued to other letters name a thing, not a quantity ("2FA", "mp3", "h264", "v2",
# "iPhone6"): they are words, so "turn on 2FA" and "enable 2FA" do not differ on numbers.
_NUMBER = re.compile(r"(?<![A-Za-z0-9.,])(\d+(?:[.,]\d+)*)([A-Za-z]*)")
_NUMBER_SUFFIXES = frozenset(
    """st nd rd th s k m bn mm cm km kg g lb lbs mg ml kb mb gb tb pb hz khz mhz ghz ms sec secs min mins h hr hrs
    am pm x px pt""".split()
)
_NEGATIONS = frozenset({"not", "no", "never", "without", "nor", "cannot", "none", "nothing"})
STOPWORDS = frozenset(
    """a an the and or but if then than so to of in on at by for with from into onto about as is are was were be been
    being am do does did doing done have has had having i me my mine we us our you your yours he him his she her hers
    it its they them their theirs this that these those there here what which who whom whose when where why how can
    could would should will shall may might must just also very really any some all each every more most much many
    such own same other others only even ever get got getting one ones s t don doesn didn isn aren wasn weren haven
    hasn hadn won wouldn shouldn couldn ll ve re d m o y best good way ways make makes thing things someone something
    anyone anything people person use used using""".split()
)
# Words that point back at an earlier turn: a question built on them means something only with its context.
_ANAPHORA = frozenset(
    """it its it's this that these those they them their theirs he him his she her hers there then such same one ones
    former latter above previous aforementioned""".split()
)
_FOLLOWUP_OPENERS = (
    "and ",
    "what about",
    "how about",
    "what if",
    "also",
    "but ",
    "so ",
    "then ",
    "or ",
    "same ",
    "why not",
    "is that",
    "does that",
    "do they",
    "are they",
    "is it",
    "does it",
    "can it",
    "can they",
)
FOLLOWUP_MAX_CONTENT_WORDS = 1
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


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("\u2019", "'"))


@lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    """A light suffix strip, enough to match plural/verb forms ("prices" ~ "price", "running" ~ "run")."""
    for suffix in ("ies", "ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in _words(text) if w not in STOPWORDS and w not in _NEGATIONS and not w.isdigit()}


def numbers_in(text: str) -> set[str]:
    """The quantities a question names ("2,016" and "2016" are one), leaving out digits that are part of a word."""
    return {
        number.replace(",", "")
        for number, suffix in _NUMBER.findall(text)
        if not suffix or suffix.lower() in _NUMBER_SUFFIXES
    }


def is_negated(text: str) -> bool:
    words = _words(text)
    return any(w in _NEGATIONS or w.endswith("n't") for w in words)


def questions_conflict(first: str, second: str) -> str:
    """Why two questions the embedding calls close cannot be the same question, or "" when nothing says so: other
    numbers ("...in 2016" vs "...in 2017") or the opposite polarity ("can" vs "can't"). Embeddings of short
    questions blur exactly these, a wrong stored answer costs more than a fresh one, and a learned model gives no
    guarantee on them, so they refuse outright."""
    if numbers_in(first) != numbers_in(second):
        return "numbers differ"
    if is_negated(first) != is_negated(second):
        return "negation differs"
    return ""


def question_is_context_dependent(text: str) -> bool:
    """A follow-up whose meaning leans on earlier turns: it opens like a follow-up ("and for admins?",
    "what about..."), it points back with a pronoun ("how do I change it?"), or it names too little to stand
    alone (a single content word: "pricing?")."""
    lowered = " ".join(_words(text))
    if any(lowered.startswith(opener) for opener in _FOLLOWUP_OPENERS):
        return True
    words = _words(text)
    if any(w in _ANAPHORA for w in words):
        return True
    return len(content_words(text)) <= FOLLOWUP_MAX_CONTENT_WORDS


# --- pair features and the duplicate head -------------------------------------------------------------------------

_QUESTION_WORDS = ("what", "why", "how", "when", "where", "who", "which")
# Names of the lexical features, in the order `pair_lexical_features` returns them (the weights file lists them too).
LEXICAL_FEATURES = (
    "content_jaccard",
    "content_overlap",
    "numbers_differ",
    "negation_differs",
    "question_words_differ",
    "length_ratio",
    "log_words_on_one_side",
    "log_length_difference",
    "shared_word_order",
    "character_ratio",
    "sorted_word_ratio",
    "same_first_word",
    "same_last_word",
)


def _shared_word_order(first: list[str], second: list[str]) -> float:
    """Share of pairs of shared content words that come in the same order in both questions (1.0 with fewer than
    two shared words): "France beat Germany" vs "Germany beat France" scores 0."""
    common = set(first) & set(second)
    ordered_first = [w for w in dict.fromkeys(first) if w in common]
    if len(ordered_first) < 2:
        return 1.0
    position = {w: i for i, w in enumerate(w for w in dict.fromkeys(second) if w in common)}
    sequence = [position[w] for w in ordered_first]
    n = len(sequence)
    same = sum(1 for i in range(n) for j in range(i + 1, n) if sequence[i] < sequence[j])
    return same / (n * (n - 1) / 2)


def pair_lexical_features(first: str, second: str) -> np.ndarray:
    """Cheap text features of a question pair, symmetric in the two questions (see LEXICAL_FEATURES): what the
    embedding blurs (numbers, negation, the question word, word order, the words only one side has)."""
    words_a, words_b = _words(first), _words(second)
    content_a, content_b = content_words(first), content_words(second)
    shared = len(content_a & content_b)
    union = len(content_a | content_b)
    jaccard = shared / union if union else 1.0
    if content_a and content_b:
        overlap = shared / min(len(content_a), len(content_b))
    else:
        overlap = float(content_a == content_b)
    question_words_a = {w for w in words_a if w in _QUESTION_WORDS}
    question_words_b = {w for w in words_b if w in _QUESTION_WORDS}
    length_a, length_b = len(words_a), len(words_b)
    stems_a = [_stem(w) for w in words_a if w not in STOPWORDS]
    stems_b = [_stem(w) for w in words_b if w not in STOPWORDS]
    # SequenceMatcher's ratio depends on argument order; a fixed order keeps the features symmetric.
    low, high = sorted((first.lower(), second.lower()))
    sorted_low, sorted_high = sorted((" ".join(sorted(words_a)), " ".join(sorted(words_b))))
    return np.array(
        [
            jaccard,
            overlap,
            float(numbers_in(first) != numbers_in(second)),
            float(is_negated(first) != is_negated(second)),
            float(question_words_a != question_words_b),
            min(length_a, length_b) / max(length_a, length_b, 1),
            np.log1p(len(content_a ^ content_b)),
            np.log1p(abs(length_a - length_b)),
            _shared_word_order(stems_a, stems_b),
            SequenceMatcher(None, low, high, autojunk=False).ratio(),
            SequenceMatcher(None, sorted_low, sorted_high, autojunk=False).ratio(),
            float(bool(words_a) and bool(words_b) and words_a[0] == words_b[0]),
            float(bool(words_a) and bool(words_b) and words_a[-1] == words_b[-1]),
        ]
    )


def pair_features(*, first: str, second: str, first_vector: np.ndarray, second_vector: np.ndarray) -> np.ndarray:
    """Features of a question pair for the duplicate head, in the spirit of SBERT's classification objective:
    u*v and |u-v| of the unit vectors, their cosine, then `pair_lexical_features`. Symmetric in the pair."""
    u = np.asarray(first_vector, dtype=np.float64)
    v = np.asarray(second_vector, dtype=np.float64)
    return np.concatenate([u * v, np.abs(u - v), [float(u @ v)], pair_lexical_features(first, second)])


def pair_feature_count(dimension: int) -> int:
    return 2 * dimension + 1 + len(LEXICAL_FEATURES)


def pair_probability(*, model: PairModel, features: np.ndarray) -> float:
    """Probability that the pair is a duplicate, by the duplicate head."""
    z = float(((features - model.mean) / model.scale) @ model.weights) + model.bias
    return float(1.0 / (1.0 + np.exp(-z))) if z >= 0 else float(np.exp(z) / (1.0 + np.exp(z)))


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
    # Its answer was made from a partial index (`Turn.partial_index`): never served, whatever the similarity.
    partial_index: bool = False
    # The embedding model that made `vector` (`retrieval.embeddings.model_id`; "" when not recorded). Read only when
    # `duplicate_decide` is told the question's model (`vector_model`); None, not said, then counts as another model.
    vector_model: str | None = None


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
    first turn has no context, so it matches only another first turn."""
    if not (question_is_context_dependent(question) or question_is_context_dependent(candidate.question)):
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
    size. Without it the decision's cosine gate is raised (`cosine_gate`)."""
    model = pair_model if pair_model is not None else pair_model_default()
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
) -> DuplicateDecision:
    """The best candidate (by cosine) at or above `threshold` that also passes, in this order: it has a stored
    answer, made from a complete index; the questions do not conflict (`questions_conflict`); the duplicate head
    calls the pair a duplicate (`pair_probability` >= the model's cut); the follow-up guard. Otherwise no hit.
    Candidates refused on a check are reported with the reason (the audit log says why a close match was not
    served).

    `pair_model` defaults to the shipped head (conversations/duplicate_model.json, read once per process). A head
    trained on another embedding model (`embedding_model` names the one in use; None means "the head's own") or for
    another vector size cannot score the pair: the decision then runs without it, on cosine and the other checks,
    with the gate raised to at least HEADLESS_THRESHOLD_FLOOR; so it does with `use_head=False` (the operator's
    KB_DUPLICATE_HEAD). Candidates embedded by another model are not comparable and are left out: those of another
    vector size, and, when `vector_model` names the model that made `question_vector`, those whose `vector_model`
    is not that one (`vectors_comparable`: stored before a model change, even of the same size). When that leaves
    none, the miss says so in its reason."""
    comparable = [
        c
        for c in candidates
        if c.vector.shape == question_vector.shape
        and (vector_model is None or vectors_comparable(stored_model=c.vector_model, current_model=vector_model))
    ]
    if not comparable:
        return DuplicateDecision(hit=False, reason=OTHER_MODEL_REASON if candidates else "")
    candidates = comparable
    model = pair_model if pair_model is not None else pair_model_default()
    if not head_applies(
        use_head=use_head, embedding_model=embedding_model, dimension=question_vector.shape[0], pair_model=model
    ):
        model = None
        threshold = max(threshold, HEADLESS_THRESHOLD_FLOOR)
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
            first=question, second=candidate.question, first_vector=question_vector, second_vector=candidate.vector
        )
        probability = pair_probability(model=model, features=features)
        if probability < model.cut:
            return f"pair model says different (p={probability:.2f})", probability
    if not followup_context_matches(
        question=question, previous_vector=previous_vector, candidate=candidate, threshold=context_threshold
    ):
        return "follow-up in another context", probability
    return "", probability
