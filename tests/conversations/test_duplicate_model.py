"""The duplicate head: its pure feature and probability functions, the shipped weights file, and the decision
with it. The last group embeds a few real questions with the bundled model (no database, no services)."""

import json

import numpy as np
import pytest

from conversations import decisions as d
from conversations import question_pairs as qp
from conversations.duplicate_model import (
    FEATURE_VERSION,
    MODEL_PATH,
    TENANT_FEATURE_VERSION,
    PairModel,
    pair_model_default,
    pair_model_from_dict,
)
from conversations.models import DEFAULT_THRESHOLD


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def lexical(first: str, second: str) -> dict[str, float]:
    return dict(zip(qp.LEXICAL_FEATURES, qp.pair_lexical_features(first, second), strict=True))


# --- features -------------------------------------------------------------------------------------------------


def test_lexical_features_see_what_embeddings_blur():
    same = lexical("How do I reset my password?", "How do I reset my password?")
    assert same == {
        "content_jaccard": 1.0,
        "content_overlap": 1.0,
        "numbers_differ": 0.0,
        "negation_differs": 0.0,
        "question_words_differ": 0.0,
        "length_ratio": 1.0,
        "log_words_on_one_side": 0.0,
        "log_length_difference": 0.0,
        "shared_word_order": 1.0,
        "character_ratio": 1.0,
        "sorted_word_ratio": 1.0,
        "same_first_word": 1.0,
        "same_last_word": 1.0,
    }
    assert lexical("Pricing for the 2016 plan?", "Pricing for the 2017 plan?")["numbers_differ"] == 1.0
    assert lexical("Can I export to PDF?", "Can't I export to PDF?")["negation_differs"] == 1.0
    assert lexical("Why is the sync slow?", "When is the sync slow?")["question_words_differ"] == 1.0
    swapped = lexical("How can France beat Germany at football?", "How can Germany beat France at football?")
    # france, beat, germany, football against germany, beat, france, football: 3 of the 6 word pairs keep their order
    assert swapped["shared_word_order"] == pytest.approx(0.5)
    other_topic = lexical("How do I install Python on Windows?", "How do I uninstall Java on Linux?")
    assert other_topic["content_jaccard"] == 0.0 and other_topic["log_words_on_one_side"] == pytest.approx(np.log(7))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("How do I reset my password?", "How can I change a password I forgot?"),
        ("Why can't I log in since 2023?", "What stops me logging in?"),
        ("", "Pricing?"),
    ],
)
def test_pair_features_are_symmetric(first, second):
    u, v = unit(1, 2, 3), unit(3, -1, 0.5)
    forward = qp.pair_features(first=first, second=second, first_vector=u, second_vector=v)
    backward = qp.pair_features(first=second, second=first, first_vector=v, second_vector=u)
    assert forward.shape == (qp.pair_feature_count(3),)
    np.testing.assert_allclose(forward, backward, atol=1e-6)
    np.testing.assert_allclose(forward[:3], u * v, atol=1e-6)
    np.testing.assert_allclose(forward[3:6], np.abs(u - v), atol=1e-6)
    assert forward[6] == pytest.approx(float(u @ v))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("How do I reset my password?", "How can I change a password I forgot?"),
        ("What is the capital of France?", "what's the capital of Spain"),
        ("", "Pricing?"),
    ],
)
def test_tenant_features_extend_the_shipped_ones_and_are_symmetric(first, second):
    u, v = unit(1, 2, 3), unit(3, -1, 0.5)
    shipped = qp.pair_features(first=first, second=second, first_vector=u, second_vector=v)
    forward = qp.pair_features(
        first=first, second=second, first_vector=u, second_vector=v, feature_version=TENANT_FEATURE_VERSION
    )
    backward = qp.pair_features(
        first=second, second=first, first_vector=v, second_vector=u, feature_version=TENANT_FEATURE_VERSION
    )
    assert forward.shape == (qp.pair_feature_count(3, feature_version=TENANT_FEATURE_VERSION),)
    assert forward.shape[0] == shipped.shape[0] + len(qp.PAIR_V2_FEATURES)
    np.testing.assert_allclose(forward[: shipped.shape[0]], shipped)  # a pair-v1 head reads the prefix
    np.testing.assert_allclose(forward, backward, atol=1e-6)
    with pytest.raises(ValueError, match="unknown pair feature set"):
        qp.pair_features(first=first, second=second, first_vector=u, second_vector=v, feature_version="pair-v0")


def test_tenant_features_see_names_spelling_and_the_asking_word():
    extra = dict(
        zip(
            qp.PAIR_V2_FEATURES,
            qp.pair_extra_features("What is the capital of France?", "What is the capital of Spain?"),
            strict=True,
        )
    )
    assert extra["names_differ"] == 2.0 and extra["first_question_word_differs"] == 0.0
    assert extra["fewer_words_on_one_side"] == 1.0 and extra["more_words_on_one_side"] == 1.0
    extra = dict(zip(qp.PAIR_V2_FEATURES, qp.pair_extra_features("How do I log in?", "Why do I log in?"), strict=True))
    assert extra["first_question_word_differs"] == 1.0 and extra["names_differ"] == 0.0
    assert extra["word_bigram_jaccard"] == pytest.approx(3 / 5)
    same = qp.pair_extra_features("Reset my password", "reset my password")
    assert same[0] == same[1] == same[2] == 1.0 and same[3] == same[4] == 0.0


def _model(*, dimension: int, weights=None, bias: float = 0.0, cut: float = 0.5) -> PairModel:
    count = qp.pair_feature_count(dimension)
    return PairModel(
        weights=np.zeros(count) if weights is None else np.asarray(weights, dtype=float),
        bias=bias,
        mean=np.zeros(count),
        scale=np.ones(count),
        cut=cut,
        dimension=dimension,
    )


def test_pair_probability_is_the_logistic_of_the_standardised_score():
    count = qp.pair_feature_count(2)
    weights = np.zeros(count)
    weights[4] = 2.0  # the cosine
    model = PairModel(
        weights=weights, bias=-1.0, mean=np.full(count, 0.5), scale=np.full(count, 0.25), cut=0.5, dimension=2
    )
    features = np.zeros(count)
    features[4] = 1.0
    assert qp.pair_probability(model=model, features=features) == pytest.approx(1 / (1 + np.exp(-(2.0 * 2.0 - 1.0))))
    assert qp.pair_probability(model=_model(dimension=2, bias=-800.0), features=features) == 0.0
    assert qp.pair_probability(model=_model(dimension=2, bias=800.0), features=features) == 1.0


# --- the shipped weights ------------------------------------------------------------------------------------------


def test_shipped_weights_load_with_the_expected_shape_and_provenance():
    model = pair_model_default()
    assert model is pair_model_default()  # read once per process
    assert model.meta["feature_version"] == FEATURE_VERSION
    assert model.meta["lexical_features"] == list(qp.LEXICAL_FEATURES)
    assert model.meta["embedding_model"] == "all-MiniLM-L6-v2" and model.dimension == 384
    assert model.weights.shape == (qp.pair_feature_count(384),)
    assert np.isfinite(model.weights).all() and (model.scale > 0).all()
    assert 0.0 < model.cut < 1.0
    assert len(model.meta["data_sha256"]) == 64 and model.meta["trained"]
    assert {"precision", "recall", "hit_rate"} <= set(model.meta["held_out"])
    # The default cosine gate is the one chosen with the head on the train split.
    assert model.meta["threshold"] == DEFAULT_THRESHOLD
    assert MODEL_PATH.stat().st_size < 1024 * 1024


def test_weights_of_another_feature_set_are_refused():
    payload = json.loads(MODEL_PATH.read_text(encoding="utf-8"))
    payload["feature_version"] = "pair-v0"
    with pytest.raises(ValueError, match="feature set"):
        pair_model_from_dict(payload)
    payload["feature_version"] = TENANT_FEATURE_VERSION  # pair-v1's weights read as pair-v2's would fail each turn
    with pytest.raises(ValueError, match="its feature set needs"):
        pair_model_from_dict(payload)
    payload["feature_version"] = FEATURE_VERSION
    assert pair_model_from_dict(payload).feature_version == FEATURE_VERSION
    payload["mean"] = payload["mean"][:-1]
    with pytest.raises(ValueError, match="one length"):
        pair_model_from_dict(payload)


# --- the decision with a head -------------------------------------------------------------------------------------


def _stored(turn_id, question, vector, previous=None):
    return d.StoredQuestion(
        turn_id=turn_id, question=question, vector=vector, conversation_id=1, previous_vector=previous
    )


def test_decision_refuses_what_the_head_calls_different_and_says_why():
    q, close = unit(1, 0, 0), unit(1, 0.1, 0)
    candidates = [_stored(4, "How can I reset my password quickly?", close)]
    kwargs = {"question": "How do I reset my password quickly?", "question_vector": q, "previous_vector": None}
    refused = d.duplicate_decide(
        **kwargs, candidates=candidates, threshold=0.9, pair_model=_model(dimension=3, bias=-3)
    )
    assert not refused.hit and refused.reason == "pair model says different (p=0.05)"
    assert refused.refused == [(4, "pair model says different (p=0.05)")] and refused.similarity > 0.99
    served = d.duplicate_decide(**kwargs, candidates=candidates, threshold=0.9, pair_model=_model(dimension=3, bias=3))
    assert served.hit and served.turn_id == 4 and served.probability == pytest.approx(0.9526, abs=1e-4)


def test_a_match_below_the_gate_is_still_checked_for_the_audit_log():
    # The what-if table needs to know whether a lower gate would have served the nearest match.
    q, near = unit(1, 0, 0), unit(1, 0.6, 0)  # cosine ~0.86, under the 0.9 gate
    kwargs = {"question": "How do I reset my password quickly?", "question_vector": q, "previous_vector": None}
    would_serve = d.duplicate_decide(
        **kwargs,
        candidates=[_stored(4, "How can I reset my password quickly?", near)],
        threshold=0.9,
        pair_model=_model(dimension=3, bias=3),
    )
    assert not would_serve.hit and would_serve.reason == "below threshold" and would_serve.turn_id == 4
    assert would_serve.passes_checks is True and would_serve.probability == pytest.approx(0.9526, abs=1e-4)
    head_refuses = d.duplicate_decide(
        **kwargs,
        candidates=[_stored(4, "How can I reset my password quickly?", near)],
        threshold=0.9,
        pair_model=_model(dimension=3, bias=-3),
    )
    assert head_refuses.passes_checks is False and head_refuses.probability == pytest.approx(0.0474, abs=1e-4)
    assert head_refuses.reason == "below threshold"  # the reason stays the gate's: it decided the turn
    numbers_differ = d.duplicate_decide(
        **{**kwargs, "question": "Pricing of the 2017 plan?"},
        candidates=[_stored(5, "Pricing of the 2016 plan?", near)],
        threshold=0.9,
        pair_model=_model(dimension=3, bias=3),
    )
    assert numbers_differ.passes_checks is False and numbers_differ.probability is None
    served = d.duplicate_decide(
        **kwargs,
        candidates=[_stored(4, "How can I reset my password quickly?", near)],
        threshold=0.8,
        pair_model=_model(dimension=3, bias=3),
    )
    assert served.hit and served.passes_checks is True
    assert d.duplicate_decide(**kwargs, candidates=[], threshold=0.8).passes_checks is None


def test_conflicts_refuse_before_the_head_is_asked():
    q = unit(1, 0, 0)
    candidates = [_stored(1, "Can't I export the 2017 report?", unit(1, 0.05, 0))]
    decision = d.duplicate_decide(
        question="Can I export the 2017 report?",
        question_vector=q,
        previous_vector=None,
        candidates=candidates,
        threshold=0.9,
        pair_model=_model(dimension=3, bias=50),
    )
    assert not decision.hit and decision.reason == "negation differs"


def test_a_head_for_another_vector_size_is_not_used():
    q = unit(1, 0, 0)
    decision = d.duplicate_decide(
        question="How do I reset my password quickly?",
        question_vector=q,
        previous_vector=None,
        candidates=[_stored(4, "How can I reset my password quickly?", unit(1, 0.1, 0))],
        threshold=0.9,
        pair_model=_model(dimension=384, bias=-50),
    )
    assert decision.hit and decision.probability is None


def _model_of(embedding_model: str, **kwargs) -> PairModel:
    model = _model(**kwargs)
    return PairModel(**{**model.__dict__, "meta": {"embedding_model": embedding_model}})


@pytest.mark.parametrize("similarity_axis", [0.5, 0.1])
def test_without_a_head_for_the_model_in_use_the_gate_rises_to_the_headless_floor(similarity_axis):
    q, close = unit(1, 0, 0), unit(1, similarity_axis, 0)  # cosine 0.894 and 0.995
    kwargs = {
        "question": "How do I reset my password quickly?",
        "question_vector": q,
        "previous_vector": None,
        "candidates": [_stored(4, "How can I reset my password quickly?", close)],
        "threshold": 0.76,
    }
    head = _model_of("all-MiniLM-L6-v2", dimension=3, bias=50)
    with_head = d.duplicate_decide(**kwargs, pair_model=head, embedding_model="all-MiniLM-L6-v2")
    assert with_head.hit and with_head.probability == pytest.approx(1.0)
    other_model = d.duplicate_decide(**kwargs, pair_model=head, embedding_model="bge-small-en")
    assert other_model.probability is None
    assert other_model.hit == (float(q @ close) >= d.HEADLESS_THRESHOLD_FLOOR)
    switched_off = d.duplicate_decide(**kwargs, pair_model=head, embedding_model="all-MiniLM-L6-v2", use_head=False)
    assert switched_off.probability is None
    assert switched_off.hit == (float(q @ close) >= d.HEADLESS_THRESHOLD_FLOOR)


@pytest.fixture(scope="module")
def embed():
    from retrieval.embeddings import embed_texts

    return lambda *texts: embed_texts(list(texts))


def _decide_real(embed, question: str, stored: str) -> d.DuplicateDecision:
    vectors = embed(question, stored)
    return d.duplicate_decide(
        question=question,
        question_vector=vectors[0],
        previous_vector=None,
        candidates=[_stored(1, stored, vectors[1])],
        threshold=DEFAULT_THRESHOLD,
    )


@pytest.mark.parametrize(
    ("question", "stored"),
    [
        ("How can I reset my password?", "How do I reset my password?"),
        ("How do I reset my password?", "How can I reset my password?"),
        ("How much does the Team plan cost?", "What does the Team plan cost?"),
    ],
)
def test_shipped_head_serves_true_paraphrases(embed, question, stored):
    decision = _decide_real(embed, question, stored)
    assert decision.hit, decision
    assert decision.probability >= pair_model_default().cut


@pytest.mark.parametrize(
    ("question", "stored", "reason"),
    [
        ("What did the Pro plan cost in 2016?", "What did the Pro plan cost in 2017?", "numbers differ"),
        ("Can I export reports to PDF?", "Why can't I export reports to PDF?", "negation differs"),
        ("How do I install Python on Windows?", "How do I install Python on Linux?", "pair model says different"),
        ("How do I connect Slack?", "How do I disconnect Slack?", "pair model says different"),
    ],
)
def test_shipped_head_refuses_changed_facts_and_topics_with_a_reason(embed, question, stored, reason):
    decision = _decide_real(embed, question, stored)
    assert not decision.hit
    assert decision.similarity >= DEFAULT_THRESHOLD  # close enough for the gate: refused by the check named
    assert decision.reason.startswith(reason), decision
