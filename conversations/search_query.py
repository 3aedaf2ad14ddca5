"""What a turn searches with: the words of its lexical (BM25) leg and the text its vector leg embeds, from the
question and the conversation's recent user questions. A pure function, no I/O: the turn pipeline calls it before
the search (`services.turns`).

A follow-up ("Can women play it?") names too little for BM25 to find its topic by: its own words are weak terms, and
in hybrid mode fusion then lets BM25's hits displace the vector leg's good ones. The questions before it name the
topic, so a context-dependent question (`question_pairs.question_is_context_dependent`) is searched with the words of
the questions it leans on as well as its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from conversations.question_pairs import question_is_context_dependent, question_words

# How many earlier questions a follow-up's search may take words from: walking back from the newest, up to and
# including the first one that stands alone (a follow-up of a follow-up leans on both).
FOLLOWUP_CONTEXT_QUESTIONS = 3
# Whether the vector leg embeds the joined text too (a second embedding per follow-up), or the question alone.
FOLLOWUP_VECTOR_EXPANDED = False


@dataclass(frozen=True)
class SearchQuery:
    """A turn's search: `text` is what BM25 ranks by, `vector_text` what the query vector embeds, `context` the
    earlier questions joined to the question in them (oldest first; empty when the question is taken as asked)."""

    text: str
    vector_text: str
    context: tuple[str, ...] = ()


def search_query_build(
    *,
    question: str,
    recent_questions: Sequence[str],
    names_topic: Sequence[bool] = (),
    context_questions: int | None = None,
    vector_expanded: bool | None = None,
) -> SearchQuery:
    """The search of a turn asking `question` after `recent_questions` (the conversation's recent user questions,
    oldest first, each the question a turn was decided with: a follow-up's standalone rewrite where it has one).
    `names_topic`, when the turn classified them (one flag per recent question, `decisions.names_topic`), leaves out
    those that name no topic of their own (small talk, "show me that again"); empty, every one counts (flags for some
    questions only are a ValueError).

    A question that stands alone, or the first of its conversation, is searched as asked. A context-dependent one is
    searched with the newest earlier questions joined before it, walking back until one stands alone, at most
    `context_questions` of them (FOLLOWUP_CONTEXT_QUESTIONS by default; 0 takes every question as asked). A question
    with no word the rule can read (no Latin letter or digit: a Chinese question) is taken as asked, since whether it
    depends on its context cannot be told from it. Blank earlier questions are skipped. The vector leg embeds the
    same joined text when `vector_expanded` (FOLLOWUP_VECTOR_EXPANDED by default), else the question alone."""
    limit = FOLLOWUP_CONTEXT_QUESTIONS if context_questions is None else context_questions
    expand_vector = FOLLOWUP_VECTOR_EXPANDED if vector_expanded is None else vector_expanded
    as_asked = SearchQuery(text=question, vector_text=question)
    if limit <= 0 or not question_words(question) or not question_is_context_dependent(question):
        return as_asked
    if names_topic:
        recent_questions = [earlier for earlier, named in zip(recent_questions, names_topic, strict=True) if named]
    context: list[str] = []
    for earlier in reversed(recent_questions):
        if len(context) >= limit:
            break
        earlier = earlier.strip()
        if not earlier:
            continue
        context.append(earlier)
        if not question_is_context_dependent(earlier):
            break
    if not context:
        return as_asked
    context.reverse()
    joined = " ".join([*context, question])
    return SearchQuery(text=joined, vector_text=joined if expand_vector else question, context=tuple(context))
