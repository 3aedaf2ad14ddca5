"""What of a conversation's past an LLM is shown, and when a follow-up is rewritten: pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence

from conversations.dedup.question_pairs import question_is_context_dependent
from conversations.models import IntentBehaviour


def history_select(
    *, exchanges: Sequence[tuple[str, str]], token_counts: Sequence[int], max_turns: int, max_tokens: int
) -> list[int]:
    """Indexes (oldest first) of the exchanges the model is shown: the newest ones, at most `max_turns`, while their
    tokens together stay within `max_tokens`. Kept from the newest back and contiguous: an exchange that does not fit
    ends the history, since an older one after a gap would read as if it came right before the question."""
    chosen: list[int] = []
    spent = 0
    for index in range(len(exchanges) - 1, -1, -1):
        if len(chosen) >= max_turns or spent + token_counts[index] > max_tokens:
            break
        spent += token_counts[index]
        chosen.append(index)
    return chosen[::-1]


def rewrite_applies(
    *, enabled: bool, generator_rewrites: bool, question: str, behaviour: str, has_history: bool
) -> bool:
    """Whether a question is rewritten into a standalone one before the turn decides: the tenant opted in, the answer
    service can (an LLM; the extractive generator cannot), there is a conversation to read it in, it reads as a
    follow-up (`question_is_context_dependent`), and it is an ordinary question (small talk, "show me that again"
    and "explain in more detail" have rules of their own about the question before them)."""
    return (
        enabled
        and generator_rewrites
        and has_history
        and behaviour == IntentBehaviour.NORMAL
        and question_is_context_dependent(question)
    )
