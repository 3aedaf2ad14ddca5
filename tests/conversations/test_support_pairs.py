"""The shipped duplicate head on our own support-desk questions (tests/conversations/data/support_pairs.jsonl,
written for this project; nothing in it was used to train or tune the head).

QQP, the head's training data, calls far fewer rewordings duplicate than a support desk would, so the head refuses
many clear paraphrases here (docs/conversations.md, "Threshold choice"). What this pins down: the paraphrases it
does serve, and that no near-miss (another plan, product, number, polarity, role or action) is ever served, the
ones the head itself refuses among them. A head that called everything a duplicate, or nothing, fails."""

import json
from pathlib import Path

import numpy as np
import pytest

from conversations.dedup import decisions as d
from conversations.models import DEFAULT_THRESHOLD

SUPPORT_PAIRS = [
    json.loads(line)
    for line in (Path(__file__).parent / "data" / "support_pairs.jsonl").read_text(encoding="utf-8").splitlines()
    if line.strip()
]
# Paraphrases the shipped head serves (second question of the pair), measured; retraining may add to them.
SERVED = {
    "How can I reset my password?",
    "How can I update the email address on my account?",
    "Is it possible to export my data as a CSV file?",
    "How can I cancel my subscription?",
    "Why did my credit card get declined?",
    "Where do I download the mobile app?",
    "What is the rate limit of the API?",
    "How can I configure single sign-on?",
    "Is a refund possible for my annual plan?",
    "Where can I find my API key?",
    "How can I recover a deleted file?",
    "Is phone support included in the Team plan?",
    "How can I transfer workspace ownership to someone else?",
    "Why don't I get the verification email?",
}
# Near-misses close enough for the default gate that only the head refuses them.
REFUSED_BY_THE_HEAD = {
    "How do I sync my calendar with Outlook?",
    "Can I see my team's private messages?",
    "How do I pause my subscription?",
}


@pytest.fixture(scope="module")
def decided() -> dict[str, tuple[dict, d.DuplicateDecision]]:
    """Every pair through `duplicate_decide` with the shipped head at the default gate, by its second question."""
    from retrieval.embeddings import embed_texts

    firsts = embed_texts([pair["question1"] for pair in SUPPORT_PAIRS])
    seconds = embed_texts([pair["question2"] for pair in SUPPORT_PAIRS])
    out = {}
    for pair, first, second in zip(SUPPORT_PAIRS, firsts, seconds, strict=True):
        decision = d.duplicate_decide(
            question=pair["question1"],
            question_vector=first,
            previous_vector=None,
            candidates=[d.StoredQuestion(1, pair["question2"], second, 1, None)],
            threshold=DEFAULT_THRESHOLD,
        )
        out[pair["question2"]] = (pair, decision)
    return out


def test_the_sanity_set_is_ours_and_balanced():
    labels = np.array([pair["is_duplicate"] for pair in SUPPORT_PAIRS])
    assert len(SUPPORT_PAIRS) == len({pair["question2"] for pair in SUPPORT_PAIRS}) >= 40
    assert 0.4 <= labels.mean() <= 0.6
    assert {pair["question2"] for pair in SUPPORT_PAIRS if pair["is_duplicate"]} >= SERVED
    assert {pair["question2"] for pair in SUPPORT_PAIRS if not pair["is_duplicate"]} >= REFUSED_BY_THE_HEAD


def test_the_shipped_head_serves_the_paraphrases_it_gets_right(decided):
    for question in SERVED:
        pair, decision = decided[question]
        assert decision.hit, (pair, decision)
        assert decision.probability is not None  # served through the head, not around it


def test_the_shipped_head_serves_no_near_miss(decided):
    near_misses = [(pair, decision) for pair, decision in decided.values() if not pair["is_duplicate"]]
    assert len(near_misses) >= 20
    assert [pair for pair, decision in near_misses if decision.hit] == []
    for pair, decision in near_misses:
        if pair["kind"] in ("other number", "negation"):
            assert not decision.hit, pair


def test_near_misses_past_the_gate_are_refused_by_the_head_itself(decided):
    for question in REFUSED_BY_THE_HEAD:
        pair, decision = decided[question]
        assert decision.similarity >= DEFAULT_THRESHOLD, pair  # the gate let it through
        assert decision.reason.startswith("pair model says different"), (pair, decision)


def test_opposite_actions_are_refused_by_the_rule_before_the_head(decided):
    """Connect / disconnect, enable / disable, export / import past the gate (add / remove is under it): the head
    refused these too, but a rule says it outright (`question_pairs.opposites_differ`), whatever a head's weights.
    "Invite" / "remove" are no opposites the rule names: the head refuses that one."""
    opposites = [(pair, decision) for pair, decision in decided.values() if pair["kind"] == "opposite action"]
    assert len(opposites) == 5 and not any(decision.hit for _, decision in opposites)
    by_rule = {pair["question2"] for pair, decision in opposites if decision.reason == "opposite actions"}
    assert by_rule == {"How do I disconnect Slack?", "How do I disable notifications?", "How do I import my contacts?"}
    _, under_the_gate = decided["How do I remove a payment method?"]
    assert under_the_gate.similarity < DEFAULT_THRESHOLD and under_the_gate.passes_checks is False  # the rule's too


def test_other_plans_are_refused_by_the_rule_before_the_head(decided):
    """Pro / Free past the gate: the head refused it too, but a rule says it outright (`kinds.TIERS`),
    whatever a head's weights. Team / Enterprise and Pro / Business are under the gate: the rule's too."""
    _, past_the_gate = decided["Does the Free plan include phone support?"]
    assert past_the_gate.similarity >= DEFAULT_THRESHOLD and past_the_gate.reason == "tiers differ"
    for question in ("How much does the Enterprise plan cost?", "How do I upgrade to the Business plan?"):
        _, under_the_gate = decided[question]
        assert under_the_gate.similarity < DEFAULT_THRESHOLD and under_the_gate.passes_checks is False
