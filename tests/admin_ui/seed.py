"""Realistic audit data for the browser tests and the screenshots: a month of turns with a spread of
nearest-match similarities around the threshold, some decisions reviewed (including false hits at the
threshold's edge and repeats the threshold missed). Deterministic for a given seed."""

from __future__ import annotations

import random
from datetime import datetime, time, timedelta

from django.utils import timezone

from conversations.models import DedupAction, DedupEvent, ReviewVerdict, SettingsChange
from tests.factories import ConversationFactory, DedupEventFactory, SettingsChangeFactory, TurnFactory

# (earlier question, later question, was the later one really the same question?)
PAIRS = [
    ("How do I reset my password?", "How can I change a password I forgot?", True),
    ("What does the Pro plan cost?", "How much is the Pro plan per month?", True),
    ("Can I export my data to CSV?", "Is there a way to download my data as a CSV file?", True),
    ("How do I add a team member?", "How can I invite a colleague to my workspace?", True),
    ("Where can I find my invoices?", "Where are my billing invoices?", True),
    ("Does the API have rate limits?", "How many API requests can I make per minute?", True),
    ("How do I enable two-factor authentication?", "How can I turn on 2FA?", True),
    ("Can I cancel my subscription anytime?", "Is it possible to cancel whenever I want?", True),
    ("How do I delete my account?", "How do I delete a project?", False),
    ("What is the price of the Pro plan?", "What is the price of the Enterprise plan?", False),
    ("How do I connect Slack?", "How do I disconnect Slack?", False),
]
FRESH_QUESTIONS = [
    "Which file types can I upload?",
    "Is my data encrypted at rest?",
    "How long do you keep deleted files?",
    "Can I use my own domain?",
    "What regions do you host in?",
    "How do I change the workspace name?",
]


def seed_audit_month(tenant, *, days: int = 30, seed: int = 7, threshold: float = 0.90) -> list[DedupEvent]:  # noqa: ANN001
    rng = random.Random(seed)
    now = timezone.now()
    today = timezone.localdate(now)
    events: list[DedupEvent] = []
    for day_offset in range(days - 1, -1, -1):
        conversation = ConversationFactory(tenant=tenant)
        number = 0
        for _ in range(rng.randint(4, 12)):
            number += 1
            # Within its local day and never in the future, whatever the time of the run: "now minus some minutes"
            # put the oldest day's events before the dashboard's default period when run just after midnight.
            day_start = timezone.make_aware(datetime.combine(today - timedelta(days=day_offset), time.min))
            created_at = min(day_start + timedelta(minutes=rng.randint(0, 600)), now)
            roll = rng.random()
            fields: dict = {"excluded_count": rng.randint(0, 4), "relaxed": rng.random() < 0.08}
            if roll < 0.08:
                turn = TurnFactory(tenant=tenant, conversation=conversation, number=number, question="thanks!")
                fields.update(action=DedupAction.SMALLTALK, similarity=None, intent="thanks", excluded_count=0)
                matched = None
            else:
                earlier, later, same = rng.choice(PAIRS)
                if roll < 0.40:
                    similarity = rng.uniform(0.30, 0.86)
                    question = rng.choice(FRESH_QUESTIONS)
                    same = False
                elif roll < 0.55:
                    similarity = rng.uniform(0.84, threshold - 0.001)
                    question = later
                else:
                    similarity = rng.uniform(threshold, 0.995) if same else rng.uniform(threshold, 0.935)
                    question = later
                matched = TurnFactory(
                    tenant=tenant, conversation=conversation, number=number, question=earlier, answer=_answer(earlier)
                )
                number += 1
                served = similarity >= threshold
                turn = TurnFactory(
                    tenant=tenant,
                    conversation=conversation,
                    number=number,
                    question=question,
                    answer=matched.answer if served else _answer(question),
                    decision=DedupAction.SERVED_CACHED if served else DedupAction.ANSWERED,
                    similarity=similarity,
                    matched_turn=matched,
                )
                fields.update(
                    action=DedupAction.SERVED_CACHED if served else DedupAction.ANSWERED,
                    similarity=round(similarity, 4),
                    intent="other",
                    tokens_saved=rng.randint(250, 900) if served else 0,
                    ms_saved=rng.uniform(700, 2600) if served else 0.0,
                    reason="similar question in this conversation" if served else "",
                )
                if similarity >= 0.84 and rng.random() < 0.5:
                    correct = same if served else not same
                    fields["review_verdict"] = ReviewVerdict.CORRECT if correct else ReviewVerdict.INCORRECT
                    fields["reviewed_at"] = created_at + timedelta(hours=2)
                    fields["review_note"] = "" if correct else "different question"
            event = DedupEventFactory(
                tenant=tenant,
                turn=turn,
                conversation=conversation,
                matched_turn=matched,
                matched_turn_ref=matched.pk if matched else None,
                threshold=threshold,
                **fields,
            )
            DedupEvent.objects.for_tenant(tenant).filter(pk=event.pk).update(created_at=created_at)
            events.append(event)
    change = SettingsChangeFactory(
        tenant=tenant, changed_by_label="admin-a@example.com", field="threshold", old_value=0.92, new_value=threshold
    )
    SettingsChange.objects.for_tenant(tenant).filter(pk=change.pk).update(changed_at=now - timedelta(days=12))
    return events


def _answer(question: str) -> str:
    return (
        f"Here is what the knowledge base says about “{question.rstrip('?')}”: open Settings, choose the "
        "matching section and follow the steps shown. [source: help-center article]"
    )
