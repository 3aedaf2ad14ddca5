"""Negation in the other languages the multilingual embedding model reads (`question_pairs`): German, Spanish, French,
Italian, Portuguese, Dutch, Polish, Russian, Turkish and Arabic have words that say "not", which these rules read as
they read English "not" and Chinese 不. Pure functions, no I/O.

A question and its opposite ("Почему я получил возврат?" / "Почему я не получил возврат?") are as close to the
embedding in these languages as in English, and the duplicate head was fitted on English and Chinese words only: only
this conflict keeps one from being served the other's stored answer.

Some of these words are English words too: French "pas" (a faux pas), Italian "mai" (Chiang Mai), Polish "nie" (an
acronym), Spanish "sin" and Portuguese "sem" (the sine, a semester). They count only in a text with none of
`_ENGLISH_SIGNS`, English function words no text of these languages uses, so English text is read as before. Not read:
Italian "non", which English writes without such a sign beside it ("Non proliferation treaty?", "a non-work
program"); negation written inside a word (Turkish -me/-ma, Japanese -ない, Korean 않다); and the Arabic ما, which
also asks "what". docs/conversations.md has what was measured.
"""

from __future__ import annotations

from collections.abc import Iterable

# Words that say "not", "no", "never", "nothing", "none" or "without" and are no English word.
NEGATIONS = frozenset(
    """nicht kein keine keinen keinem keiner keines niemals nichts ohne
    nunca jamás ningún ninguna ninguno tampoco
    jamais aucun aucune rien
    nessun nessuno nessuna niente nulla senza
    não nenhum nenhuma
    niet geen nooit niets zonder
    nigdy żaden żadna żadne bez
    не нет никогда ни ничего нельзя без
    değil yok asla hayır
    لا لم لن ليس ليست بدون""".split()
)
# Negations of these languages that are English words as well: read only in text that is not English.
AMBIGUOUS_NEGATIONS = frozenset("pas mai nie sin sem nada".split())
# French "n'" before a verb ("je n'ai pas", "ce n'est"): the elided "ne".
_ELIDED_NE = "n'"
# English function words that no text of the languages above uses: one of them says a text is English.
_ENGLISH_SIGNS = frozenset(
    """the is are what how why which when where who whom does did can could would should have has this that these
    those with from you your it's i'm don't""".split()
)


def negated(words: Iterable[str]) -> bool:
    """Whether `words` (lowercased, as `question_pairs` reads them) say no in one of these languages."""
    words = list(words)
    if any(word in NEGATIONS for word in words):
        return True
    if any(word in _ENGLISH_SIGNS for word in words):
        return False
    return any(word in AMBIGUOUS_NEGATIONS or (word.startswith(_ELIDED_NE) and len(word) > 2) for word in words)
