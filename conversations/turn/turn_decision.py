"""The decision of a whole turn, from the facts loaded for it: pure, no I/O, so every case is a row of a table test.

`turn_ask` loads the conversation, settings and state, embeds the question, classifies it and judges the nearest
stored question (`decisions.duplicate_decide`, then the matched pair's answer and sources from the database), and
hands what it found to `turn_decide`. What comes back says everything the turn then does and records: serve the
stored answer, reply to small talk, or search (with which question, leaving out which ids) and answer; the action
on the turn, the action and reason in the audit log, and what shadow mode would have done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from conversations.dedup.decisions import (
    NO_SOURCE_REASON,
    ConsumedRef,
    DuplicateDecision,
    PolicyView,
    TurnPlan,
    excluded_ids,
)
from conversations.models import DedupAction, Granularity, IntentBehaviour
from conversations.turn.languages import NOTHING_EARLIER, reply, smalltalk_reply
from conversations.turn.state import RecentTurn, StoredAnswer

SHADOW_SERVE_REASON = "shadow mode: would have served the stored answer"


class TurnKind(StrEnum):
    STORED = "stored"  # serve the matched pair's answer and sources
    SMALLTALK = "smalltalk"  # a canned reply, no search
    SEARCH = "search"  # search the knowledge base and answer


class MatchRefusal(StrEnum):
    """Why a pair the duplicate decision matched is not served after all: its answer, loaded, cannot be."""

    NO_ANSWER = "no stored answer"
    SOURCES_CHANGED = "sources changed"
    # An answer that cites no passage ("I found nothing", small talk) cannot be checked against the knowledge base,
    # which may hold the answer by now (a document indexed since): never served again.
    NO_SOURCE = NO_SOURCE_REASON


@dataclass(frozen=True)
class MatchFacts:
    """What the database holds of the pair a duplicate decision matched."""

    answer: StoredAnswer | None  # None: the pair has no answer, or is gone
    sources_intact: bool  # every source chunk is there with the content it had
    cites_sources: bool  # the answer cites at least one passage


@dataclass(frozen=True)
class TurnFacts:
    policy: PolicyView
    intent: str
    behaviour: str
    force_refresh: bool
    plan: TurnPlan  # `decisions.turn_plan` of the four above, worked out once, before the candidates are looked for
    duplicate: DuplicateDecision  # `duplicate_decide`'s, or a miss when duplicates were not looked for
    match: MatchFacts | None  # loaded for a duplicate hit only
    recent_turns: Sequence[RecentTurn]  # oldest first
    recent_names_topic: Sequence[bool]  # per recent turn: it names a topic of its own (`decisions.names_topic`)
    consumed: Sequence[ConsumedRef]
    next_turn_number: int
    language: str = "en"  # the question's (`languages.reply_language`): the platform's own replies are in it


@dataclass(frozen=True)
class TurnDecision:
    kind: TurnKind
    action: str  # DedupAction recorded on the turn
    audit_action: str  # the audit event's action: what shadow mode would have done, else `action`
    shadow_action: str | None  # what shadow mode kept from happening
    reason: str
    duplicate: DuplicateDecision  # refused after all when the matched answer cannot be served
    matched: StoredAnswer | None  # the pair served, or that shadow mode would have served
    smalltalk_reply: str = ""
    search_topic: RecentTurn | None = None  # search and answer for this earlier question instead of the turn's own
    excluded: tuple[int, ...] = ()  # ids (of the policy's granularity) the last turns showed
    applied_exclusion: tuple[int, ...] = ()  # what the search leaves out (none in shadow mode)
    excluded_content_chunk_ids: tuple[int, ...] = ()  # chunks whose texts the search leaves out, in any document
    audit_shadow: bool = False  # the audit event is marked as shadow mode's


def match_refusal(match: MatchFacts | None) -> MatchRefusal | None:
    if match is None or match.answer is None:
        return MatchRefusal.NO_ANSWER
    if not match.sources_intact:
        return MatchRefusal.SOURCES_CHANGED
    if not match.cites_sources:
        return MatchRefusal.NO_SOURCE
    return None


def search_topic(
    *, behaviour: str, recent_turns: Sequence[RecentTurn], names_topic: Sequence[bool]
) -> RecentTurn | None:
    """ "Show me that again" and "explain in more detail" are about the previous question, not about their own words:
    the last recent question that names a topic (a second "show me that again", or a "thanks" in between, stands for
    the same one). None for any other behaviour, or when no recent question names one."""
    if behaviour not in (IntentBehaviour.REPEAT, IntentBehaviour.ELABORATE):
        return None
    return next((turn for turn, named in zip(recent_turns[::-1], names_topic[::-1], strict=True) if named), None)


def turn_decide(facts: TurnFacts) -> TurnDecision:
    """The whole turn from its facts. A duplicate hit is served unless its answer cannot be (`match_refusal`) or
    shadow mode only records it; small talk gets its reply; anything else searches, leaving out what the exclusion
    window consumed (recorded but not applied in shadow mode), and is `bypassed` when question dedup was skipped on
    purpose or refused a close match, else `answered`."""
    policy = facts.policy
    plan = facts.plan
    duplicate, matched = facts.duplicate, None
    if duplicate.hit:
        refusal = match_refusal(facts.match)
        if refusal is None:
            matched = facts.match.answer
        else:
            # Refused after the decision: the audit event keeps what the decision found (the head's probability)
            # and says that the match did not pass every check.
            duplicate = replace(
                duplicate, hit=False, reason=str(refusal), passes_checks=False, close_match_refused=True
            )
    shadowed = duplicate.hit and policy.shadow_mode
    reason = SHADOW_SERVE_REASON if shadowed else (plan.bypass_reason or duplicate.reason)

    if duplicate.hit and not policy.shadow_mode:
        action = DedupAction.SERVED_CACHED
        return TurnDecision(
            kind=TurnKind.STORED,
            action=action,
            audit_action=action,
            shadow_action=None,
            reason=reason,
            duplicate=duplicate,
            matched=matched,
        )
    if plan.smalltalk:
        return TurnDecision(
            kind=TurnKind.SMALLTALK,
            action=DedupAction.SMALLTALK,
            audit_action=DedupAction.SMALLTALK,
            shadow_action=None,
            reason=reason,
            duplicate=duplicate,
            matched=None,
            smalltalk_reply=smalltalk_reply(facts.intent, facts.language),
        )

    topic = search_topic(
        behaviour=facts.behaviour, recent_turns=facts.recent_turns, names_topic=facts.recent_names_topic
    )
    if topic is None and facts.behaviour in (IntentBehaviour.REPEAT, IntentBehaviour.ELABORATE):
        # Nothing earlier to show or explain: the request's own words ("explain that differently") name nothing the
        # knowledge base could answer, and "I found nothing" would say the knowledge base lacks something.
        return TurnDecision(
            kind=TurnKind.SMALLTALK,
            action=DedupAction.BYPASSED,
            audit_action=DedupAction.BYPASSED,
            shadow_action=None,
            reason=f"{reason}: nothing earlier",
            duplicate=duplicate,
            matched=None,
            smalltalk_reply=reply(NOTHING_EARLIER, facts.language),
        )

    def window_ids(granularity: str) -> tuple[int, ...]:
        return tuple(
            excluded_ids(
                consumed=facts.consumed,
                granularity=granularity,
                next_turn_number=facts.next_turn_number,
                window=policy.exclusion_window,
            )
        )

    excluded = window_ids(policy.granularity) if plan.exclusion else ()
    applied = () if policy.shadow_mode else excluded
    action = DedupAction.BYPASSED if (plan.bypass_reason or duplicate.close_match_refused) else DedupAction.ANSWERED
    shadow_action = DedupAction.SERVED_CACHED if shadowed else None
    return TurnDecision(
        kind=TurnKind.SEARCH,
        action=action,
        audit_action=shadow_action or action,
        shadow_action=shadow_action,
        reason=reason,
        duplicate=duplicate,
        matched=matched,
        search_topic=topic,
        excluded=excluded,
        applied_exclusion=applied,
        # The texts those turns showed: a copy of one in another document (the same file uploaded twice) is no news.
        excluded_content_chunk_ids=window_ids(Granularity.CHUNK) if applied else (),
        audit_shadow=shadow_action is not None or (policy.shadow_mode and bool(excluded)),
    )
