"""Which retrieval mode a conversation turn searches in, from its question and the conversation's recent user
questions. A pure function, no I/O: the turn pipeline calls it before the search (`services.turns`).

A follow-up ("Can women play it?") names too little for BM25 to find its topic by: its own words are weak terms, and
in hybrid mode rank fusion gives BM25's first hits the same weight as the vector's, so they displace the vector leg's
good ones. The vector of such a question still lands near its topic. So in a hybrid knowledge base a question that
leans on the turns before it is searched by its vector alone; a question that names its own topic, the first of a
conversation, and every question of a `semantic` or `full_text` knowledge base are searched in the knowledge base's
mode. Joining the earlier questions' words to a follow-up's BM25 query instead was measured and did no better
(docs/ingestion.md, "Conversations").
"""

from __future__ import annotations

from collections.abc import Sequence

from conversations.dedup.chinese_text import reads_as_chinese
from conversations.dedup.question_pairs import content_words, question_is_context_dependent, question_words
from retrieval.vectorstore import HYBRID, SEMANTIC

# A later question with at most this many content words is searched like a follow-up, whatever its phrasing. 1 adds
# nothing to `question_is_context_dependent`'s own rule; a larger value also routes short questions that name their
# topic ("registered business"), and so short exact-term ones ("What does ZX-4471Q mean?" has 3) away from BM25,
# the case hybrid is for. docs/ingestion.md says what 2 and 3 did on MTRAG.
FOLLOWUP_SEARCH_MAX_CONTENT_WORDS = 1
# Whether a hybrid knowledge base searches such questions by vector alone; False searches every turn in its mode.
FOLLOWUPS_SEARCH_SEMANTIC = True


def search_mode_choose(
    *,
    question: str,
    knowledge_base_mode: str,
    recent_questions: Sequence[str],
    names_topic: Sequence[bool] = (),
    max_content_words: int | None = None,
    followups_semantic: bool | None = None,
) -> str:
    """The retrieval mode a turn asking `question` searches in, in a knowledge base whose mode is
    `knowledge_base_mode` (as `retrieval.selectors.retrieval_mode_resolve` resolves it), after `recent_questions`
    (the conversation's recent user questions, oldest first). `names_topic`, when the turn classified them (one flag
    per recent question, `decisions.names_topic`), leaves out those that name no topic of their own (small talk, "show
    me that again"); empty, every non-blank one counts; flags that do not match the questions one for one are a
    ValueError.

    `semantic` for a question of a hybrid knowledge base that follows an earlier question naming a topic and leans on
    it (`question_is_context_dependent`) or has at most `max_content_words` content words
    (FOLLOWUP_SEARCH_MAX_CONTENT_WORDS by default), when `followups_semantic` (FOLLOWUPS_SEARCH_SEMANTIC by default);
    the knowledge base's mode otherwise. A question with no word these rules read keeps the knowledge base's mode,
    since whether it leans on its context cannot be told from it; so does a Chinese one, whose follow-ups the rules
    now tell, because searching them by vector alone was measured on English only, and the bundled English model
    reads Chinese characters as unknown tokens: there the full-text leg (jieba) is what finds a Chinese follow-up's
    topic."""
    max_words = FOLLOWUP_SEARCH_MAX_CONTENT_WORDS if max_content_words is None else max_content_words
    enabled = FOLLOWUPS_SEARCH_SEMANTIC if followups_semantic is None else followups_semantic
    if not enabled or knowledge_base_mode != HYBRID or not question_words(question) or reads_as_chinese(question):
        return knowledge_base_mode
    if names_topic:
        recent_questions = [earlier for earlier, named in zip(recent_questions, names_topic, strict=True) if named]
    if not any(earlier.strip() for earlier in recent_questions):
        return knowledge_base_mode
    if question_is_context_dependent(question) or len(content_words(question)) <= max_words:
        return SEMANTIC
    return knowledge_base_mode
