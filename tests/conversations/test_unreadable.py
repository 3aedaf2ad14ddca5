"""Questions the embedding model cannot read: never served another question's answer by similarity (pure decisions,
the bundled model's readability measure, the labels they give, and the path of a turn through the API)."""

import numpy as np
import pytest

from conversations.dedup import decisions as d
from conversations.models import DedupAction, DedupEvent, ReviewVerdict
from conversations.review.label_rules import verdict_label
from retrieval.embeddings import UNREADABLE_UNKNOWN_SHARE, text_readable, unknown_share
from tests.conversations.helpers import HELP_CENTRE_ZH, indexed_kb
from tests.conversations.test_api import ask, start

SAME = np.array([1.0, 0.0, 0.0], dtype=np.float32)  # every unreadable question's vector looks alike


def stored(turn_id: int, question: str, **fields: object) -> d.StoredQuestion:
    return d.StoredQuestion(
        turn_id=turn_id, question=question, vector=SAME, conversation_id=1, readable=False, **fields
    )


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        ("怎么重置密码？", "怎么重置密码?", True),
        ("怎么重置密码？", "怎么重置密码", True),
        ("ＡＢＣ 退款", "abc  退款！", True),
        ("怎么重置密码？", "怎么修改密码？", False),
        ("退款多久能到账？", "发票什么时候开？", False),
        ("How do I reset it?", "how do i reset it", True),
    ],
)
def test_question_normalised(first, second, same):
    assert (d.question_normalised(first) == d.question_normalised(second)) is same


def test_an_unreadable_question_is_not_served_a_look_alike():
    decision = d.duplicate_decide(
        question="退款多久能到账？",
        question_vector=SAME,
        previous_vector=None,
        candidates=[stored(1, "如何申请退款？"), stored(2, "发票什么时候开？")],
        threshold=0.5,
        question_readable=False,
    )
    assert not decision.hit
    assert decision.reason == d.UNREADABLE_REASON
    assert decision.similarity is None and decision.probability is None and decision.passes_checks is None


def test_an_unreadable_question_asked_again_word_for_word_is_served_the_latest_asking():
    decision = d.duplicate_decide(
        question="怎么重置密码?",
        question_vector=SAME,
        previous_vector=None,
        candidates=[stored(1, "怎么重置密码？"), stored(2, "如何申请退款？"), stored(3, "怎么重置密码")],
        threshold=0.99,
        question_readable=False,
    )
    assert decision.hit and decision.turn_id == 3
    assert decision.reason == d.UNREADABLE_REPEAT_REASON
    assert decision.similarity is None


@pytest.mark.parametrize(
    ("fields", "served"),
    [
        ({"answerable": False}, False),
        ({"partial_index": True}, False),
        ({}, True),
    ],
)
def test_an_exact_repeat_needs_a_servable_answer(fields, served):
    decision = d.duplicate_decide(
        question="怎么重置密码？",
        question_vector=SAME,
        previous_vector=None,
        candidates=[stored(1, "怎么重置密码？", **fields)],
        threshold=0.76,
        question_readable=False,
    )
    assert decision.hit is served


def test_a_context_dependent_exact_repeat_is_served_only_in_a_known_same_context():
    context = np.array([0.0, 1.0, 0.0], dtype=np.float32)
    # "What about for admins?" leans on its context; a vector the model cannot read tells no context from another.
    question = "What about 管理员?"
    assert not text_readable(question)
    elsewhere = stored(1, question, previous_vector=context)
    decided = d.duplicate_decide(
        question=question,
        question_vector=SAME,
        previous_vector=context,
        candidates=[elsewhere],
        threshold=0.76,
        question_readable=False,
    )
    assert not decided.hit
    just_before = stored(2, question, previous_vector=context, asked_just_before=True)
    decided = d.duplicate_decide(
        question=question,
        question_vector=SAME,
        previous_vector=context,
        candidates=[just_before],
        threshold=0.76,
        question_readable=False,
    )
    assert decided.hit


def test_a_readable_question_is_never_compared_with_an_unreadable_stored_one():
    decision = d.duplicate_decide(
        question="How do I reset my password?",
        question_vector=SAME,
        previous_vector=None,
        candidates=[stored(1, "怎么重置密码？")],
        threshold=0.5,
        use_head=False,
    )
    assert not decision.hit and decision.similarity is None and decision.reason == ""


@pytest.mark.parametrize("reason", [d.UNREADABLE_REASON, d.UNREADABLE_REPEAT_REASON])
@pytest.mark.parametrize("action", [DedupAction.SERVED_CACHED, DedupAction.ANSWERED, DedupAction.BYPASSED])
@pytest.mark.parametrize("verdict", [ReviewVerdict.CORRECT, ReviewVerdict.INCORRECT])
def test_a_decision_on_an_unreadable_question_gives_no_label(reason, action, verdict):
    assert verdict_label(action=action, has_match=True, reason=reason, verdict=verdict) is None


@pytest.mark.parametrize(
    ("text", "readable"),
    [
        ("How do I reset my password?", True),
        ("Wie setze ich mein Passwort zurück?", True),
        ("Can I pay with an iPhone?", True),
        ("怎么重置密码？", False),
        ("我忘了密码怎么办？", False),
        ("iPhone 怎么设置 Face ID？", False),
    ],
)
def test_the_bundled_model_reads_english_and_not_chinese(text, readable):
    assert text_readable(text) is readable
    assert (unknown_share(text) < UNREADABLE_UNKNOWN_SHARE) is readable


@pytest.mark.integration
@pytest.mark.django_db
def test_a_chinese_conversation_on_the_bundled_model_makes_no_false_hit(
    api_client, tenant, redis_available, milvus_server
):
    kb = indexed_kb(tenant, documents=HELP_CENTRE_ZH, name="帮助中心")
    conversation_id = start(api_client, kb)
    asked = {}
    for question in ["怎么重置密码？", "如何申请退款？", "退款多久能到账？", "发票什么时候开？", "什么时候发货？"]:
        body = ask(api_client, conversation_id, question)
        assert body["dedup"]["action"] != "served_cached", (question, body["dedup"])
        asked[question] = body["turn_id"]
    again = ask(api_client, conversation_id, "什么时候发货?")
    assert again["dedup"]["action"] == "served_cached"
    assert again["dedup"]["matched_turn_id"] == asked["什么时候发货？"]
    # A question that stands alone (the Chinese rules read it so) is served its exact repeat turns later too.
    later = ask(api_client, conversation_id, "怎么重置密码")
    assert later["dedup"]["action"] == "served_cached"
    assert later["dedup"]["matched_turn_id"] == asked["怎么重置密码？"]
    event = DedupEvent.objects.for_tenant(tenant).get(turn_id=again["turn_id"])
    assert event.reason == d.UNREADABLE_REPEAT_REASON and event.similarity is None
    missed = DedupEvent.objects.for_tenant(tenant).get(turn_id=asked["退款多久能到账？"])
    assert missed.reason == d.UNREADABLE_REASON and missed.similarity is None
