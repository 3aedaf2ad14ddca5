"""`turn_decide` as a table: every way a turn can go, from the facts alone (no database, no model)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conversations.dedup.decisions import ConsumedRef, DuplicateDecision, PolicyView, turn_plan
from conversations.models import DedupAction
from conversations.turn.languages import NOTHING_EARLIER, REPLIES
from conversations.turn.state import RecentTurn, StoredAnswer
from conversations.turn.turn_decision import (
    SHADOW_SERVE_REASON,
    MatchFacts,
    TurnFacts,
    TurnKind,
    search_topic,
    turn_decide,
)

ANSWER = StoredAnswer(
    turn_id=7,
    answer="Reset it from the sign-in page. [1]",
    answer_tokens=9,
    context_tokens=120,
    elapsed_ms=300.0,
    source_chunk_ids=[11],
    source_chunks={"11": {"hash": "h", "score": 0.9, "document_id": 3}},
)
GOOD = MatchFacts(answer=ANSWER, sources_intact=True, cites_sources=True)
HIT = DuplicateDecision(hit=True, turn_id=7, similarity=0.93, probability=0.97, passes_checks=True, gate=0.76)
BELOW = DuplicateDecision(hit=False, turn_id=7, similarity=0.52, reason="below threshold", gate=0.76)
REFUSED = DuplicateDecision(
    hit=False,
    turn_id=7,
    similarity=0.88,
    reason="follow-up in another context",
    refused=[(7, "follow-up in another context")],
    gate=0.76,
    close_match_refused=True,
)
NONE = DuplicateDecision(hit=False)


def recent(number: int, question: str) -> RecentTurn:
    return RecentTurn(
        turn_id=100 + number, number=number, question=question, vector=np.zeros(4, np.float32), answerable=True
    )


RECENT = [recent(1, "How do I reset my password?"), recent(2, "thanks")]
# Turn 1 showed doc 3 (chunk 11), turn 2 doc 4 (chunk 12): both inside a window of 5 for turn 3.
CONSUMED = [
    ConsumedRef("doc", 3, 1),
    ConsumedRef("chunk", 11, 1),
    ConsumedRef("doc", 4, 2),
    ConsumedRef("chunk", 12, 2),
]


def facts(**changes: object) -> TurnFacts:
    base = TurnFacts(
        policy=PolicyView(),
        intent="other",
        behaviour="normal",
        force_refresh=False,
        plan=turn_plan(policy=PolicyView(), intent="other", behaviour="normal", force_refresh=False),
        duplicate=NONE,
        match=None,
        recent_turns=RECENT,
        recent_names_topic=[True, False],
        consumed=CONSUMED,
        next_turn_number=3,
    )
    policy_changes = changes.pop("policy", {})
    changed = replace(base, policy=replace(base.policy, **policy_changes), **changes)
    # The plan the turn's judging works out once from the policy, intent, behaviour and flag (`decisions.turn_plan`).
    plan = turn_plan(
        policy=changed.policy, intent=changed.intent, behaviour=changed.behaviour, force_refresh=changed.force_refresh
    )
    return replace(changed, plan=plan)


SHADOW = {"shadow_mode": True}
# name, facts, expected: kind, action, audit action, reason, excluded ids, applied exclusion, audit shadow, served
CASES = [
    ("a hit is served", facts(duplicate=HIT, match=GOOD), TurnKind.STORED, "served_cached", "served_cached", "", (), (), False, True),
    ("a miss below the gate searches", facts(duplicate=BELOW), TurnKind.SEARCH, "answered", "answered", "below threshold", (11, 12), (11, 12), False, False),
    ("no candidate at all searches", facts(), TurnKind.SEARCH, "answered", "answered", "", (11, 12), (11, 12), False, False),
    ("a close match refused by a check is bypassed", facts(duplicate=REFUSED), TurnKind.SEARCH, "bypassed", "bypassed", "follow-up in another context", (11, 12), (11, 12), False, False),
    ("a hit whose pair has no answer is refused", facts(duplicate=HIT, match=MatchFacts(None, False, False)), TurnKind.SEARCH, "bypassed", "bypassed", "no stored answer", (11, 12), (11, 12), False, False),
    ("a hit whose sources changed is refused", facts(duplicate=HIT, match=replace(GOOD, sources_intact=False)), TurnKind.SEARCH, "bypassed", "bypassed", "sources changed", (11, 12), (11, 12), False, False),
    ("a hit citing no source is refused", facts(duplicate=HIT, match=replace(GOOD, cites_sources=False)), TurnKind.SEARCH, "bypassed", "bypassed", "answer cites no source", (11, 12), (11, 12), False, False),
    ("shadow mode records the hit it would serve and excludes nothing", facts(duplicate=HIT, match=GOOD, policy=SHADOW), TurnKind.SEARCH, "answered", "served_cached", SHADOW_SERVE_REASON, (11, 12), (), True, True),
    ("shadow mode on a miss marks the event when it would exclude", facts(duplicate=BELOW, policy=SHADOW), TurnKind.SEARCH, "answered", "answered", "below threshold", (11, 12), (), True, False),
    ("shadow mode with nothing to exclude is an ordinary event", facts(consumed=[], policy=SHADOW), TurnKind.SEARCH, "answered", "answered", "", (), (), False, False),
    ("small talk replies", facts(intent="greeting", behaviour="smalltalk"), TurnKind.SMALLTALK, "smalltalk", "smalltalk", "", (), (), False, False),
    ("force_refresh bypasses", facts(force_refresh=True), TurnKind.SEARCH, "bypassed", "bypassed", "force_refresh", (11, 12), (11, 12), False, False),
    ("elaborate bypasses, excluding", facts(intent="elaborate", behaviour="elaborate"), TurnKind.SEARCH, "bypassed", "bypassed", "intent elaborate", (11, 12), (11, 12), False, False),
    ("repeat bypasses and shows again", facts(intent="repeat", behaviour="repeat"), TurnKind.SEARCH, "bypassed", "bypassed", "intent repeat", (), (), False, False),
    ("repeat with no earlier topic is told so", facts(intent="repeat", behaviour="repeat", recent_names_topic=[False, False]), TurnKind.SMALLTALK, "bypassed", "bypassed", "intent repeat: nothing earlier", (), (), False, False),
    ("elaborate as the first turn is told so", facts(intent="elaborate", behaviour="elaborate", recent_turns=[], recent_names_topic=[], consumed=[]), TurnKind.SMALLTALK, "bypassed", "bypassed", "intent elaborate: nothing earlier", (), (), False, False),
    ("an intent off the allowlist bypasses", facts(intent="billing"), TurnKind.SEARCH, "bypassed", "bypassed", "intent billing not allowlisted", (11, 12), (11, 12), False, False),
    ("scope off answers without looking", facts(policy={"scope": "off"}), TurnKind.SEARCH, "answered", "answered", "", (11, 12), (11, 12), False, False),
    ("exclusion off excludes nothing", facts(policy={"exclusion_enabled": False}), TurnKind.SEARCH, "answered", "answered", "", (), (), False, False),
    ("document granularity excludes documents", facts(policy={"granularity": "doc"}), TurnKind.SEARCH, "answered", "answered", "", (3, 4), (3, 4), False, False),
    ("a window of 1 excludes the last turn only", facts(policy={"exclusion_window": 1}), TurnKind.SEARCH, "answered", "answered", "", (12,), (12,), False, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("facts_", "kind", "action", "audit_action", "reason", "excluded", "applied", "audit_shadow", "served"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_turn_decide(facts_, kind, action, audit_action, reason, excluded, applied, audit_shadow, served) -> None:
    decision = turn_decide(facts_)
    assert decision.kind == kind
    assert decision.action == action
    assert decision.audit_action == audit_action
    assert decision.shadow_action == (DedupAction.SERVED_CACHED if audit_action != action else None)
    assert decision.reason == reason
    assert decision.excluded == excluded
    assert decision.applied_exclusion == applied
    # Texts are compared by chunk whatever the granularity, and only when the search leaves anything out.
    assert decision.excluded_content_chunk_ids == (
        (11, 12) if applied and facts_.policy.exclusion_window > 1 else (12,) if applied else ()
    )
    assert decision.audit_shadow is audit_shadow
    assert (decision.matched is ANSWER) is served
    assert decision.duplicate.hit is (kind == TurnKind.STORED or (served and facts_.policy.shadow_mode))


def test_a_refused_match_keeps_what_the_decision_found_and_says_it_failed_a_check() -> None:
    decision = turn_decide(facts(duplicate=HIT, match=replace(GOOD, sources_intact=False)))
    assert decision.duplicate.similarity == HIT.similarity
    assert decision.duplicate.probability == HIT.probability
    assert decision.duplicate.passes_checks is False
    assert decision.duplicate.close_match_refused is True


def test_small_talk_gets_its_own_reply_or_the_default() -> None:
    assert (
        turn_decide(facts(intent="thanks", behaviour="smalltalk")).smalltalk_reply == "You're welcome. Anything else?"
    )
    assert (
        "What would you like to know" in turn_decide(facts(intent="hello-there", behaviour="smalltalk")).smalltalk_reply
    )


@pytest.mark.parametrize(
    ("behaviour", "names_topic", "expected"),
    [
        ("repeat", [True, False], 0),  # "thanks" named no topic: the question before it
        ("elaborate", [True, True], 1),
        ("repeat", [False, False], None),  # nothing to re-ask: told so (`test_turn_decide`)
        ("normal", [True, True], None),
        ("smalltalk", [True, True], None),
    ],
)
def test_search_topic_is_the_last_question_that_names_one(behaviour, names_topic, expected) -> None:
    topic = search_topic(behaviour=behaviour, recent_turns=RECENT, names_topic=names_topic)
    assert topic is (RECENT[expected] if expected is not None else None)
    if behaviour in ("repeat", "elaborate"):
        assert (
            turn_decide(facts(intent=behaviour, behaviour=behaviour, recent_names_topic=names_topic)).search_topic
            is topic
        )


def test_a_request_for_an_earlier_answer_with_none_is_told_so_in_its_language() -> None:
    """ "Explain that differently" as a conversation's first message was searched in its own words and answered "I found
    nothing in the knowledge base that answers this", as if the knowledge base lacked something."""
    first = {"recent_turns": [], "recent_names_topic": [], "consumed": []}
    english = turn_decide(facts(intent="elaborate", behaviour="elaborate", **first)).smalltalk_reply
    assert english == REPLIES["en"][NOTHING_EARLIER]
    chinese = turn_decide(facts(intent="repeat", behaviour="repeat", language="zh", **first)).smalltalk_reply
    assert chinese == REPLIES["zh"][NOTHING_EARLIER]
    assert all(NOTHING_EARLIER in replies for replies in REPLIES.values())
