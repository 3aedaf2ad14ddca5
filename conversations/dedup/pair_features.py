"""The duplicate head's features of a question pair: the two vectors' products and cosine, then what their texts say
beyond them (shared words, numbers, negation, the asking word, word order, spelling-level overlap), in three
versioned sets. Pure functions, no I/O: the decision computes them for each candidate the head judges, and training,
the tenant verifiers and the benchmarks read the same ones through `pair_features_of`.

The words, numbers and negations are read as the conflict rules read them (`question_pairs`), so a head and the rules
beside it never disagree on what a question says.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from difflib import SequenceMatcher

import numpy as np

from conversations.dedup import chinese_text
from conversations.dedup.question_pairs import (
    STOPWORDS,
    content_words,
    is_negated,
    numbers_in,
    word_stem,
    words_read,
)

# The feature sets `pair_features` computes: the shipped head's, and the tenant verifiers', which is
# the same features followed by `PAIR_V2_FEATURES`. A file of another version is refused, never misread.
FEATURE_VERSION = "pair-v1"
TENANT_FEATURE_VERSION = "pair-v2"
# pair-v2 followed by `PAIR_V3_FEATURES` (where the shared words sit): what a tree head reads.
ORDER_FEATURE_VERSION = "pair-v3"
FEATURE_VERSIONS = (FEATURE_VERSION, TENANT_FEATURE_VERSION, ORDER_FEATURE_VERSION)

_QUESTION_WORDS = ("what", "why", "how", "when", "where", "who", "which")
# Each asking word as the English one it stands for: Chinese 怎么 and 如何 are both "how".
_ASKING = {word: word for word in _QUESTION_WORDS} | chinese_text.QUESTION_WORDS
# Names of the lexical features, in the order `pair_lexical_features` returns them (the weights file lists them too).
LEXICAL_FEATURES = (
    "content_jaccard",
    "content_overlap",
    "numbers_differ",
    "negation_differs",
    "question_words_differ",
    "length_ratio",
    "log_words_on_one_side",
    "log_length_difference",
    "shared_word_order",
    "character_ratio",
    "sorted_word_ratio",
    "same_first_word",
    "same_last_word",
)


def _shared_word_order(first: Sequence[str], second: Sequence[str]) -> float:
    """Share of pairs of shared content words that come in the same order in both questions (1.0 with fewer than
    two shared words): "France beat Germany" vs "Germany beat France" scores 0."""
    common = set(first) & set(second)
    ordered_first = [w for w in dict.fromkeys(first) if w in common]
    if len(ordered_first) < 2:
        return 1.0
    position = {w: i for i, w in enumerate(w for w in dict.fromkeys(second) if w in common)}
    sequence = [position[w] for w in ordered_first]
    n = len(sequence)
    same = sum(1 for i in range(n) for j in range(i + 1, n) if sequence[i] < sequence[j])
    return same / (n * (n - 1) / 2)


def pair_lexical_features(first: str, second: str) -> np.ndarray:
    """Cheap text features of a question pair, symmetric in the two questions (see LEXICAL_FEATURES): what the
    embedding blurs (numbers, negation, the question word, word order, the words only one side has)."""
    words_a, words_b = words_read(first), words_read(second)
    content_a, content_b = content_words(first), content_words(second)
    shared = len(content_a & content_b)
    union = len(content_a | content_b)
    jaccard = shared / union if union else 1.0
    if content_a and content_b:
        overlap = shared / min(len(content_a), len(content_b))
    else:
        overlap = float(content_a == content_b)
    question_words_a = {_ASKING[w] for w in words_a if w in _ASKING}
    question_words_b = {_ASKING[w] for w in words_b if w in _ASKING}
    length_a, length_b = len(words_a), len(words_b)
    stems_a = [word_stem(w) for w in words_a if w not in STOPWORDS]
    stems_b = [word_stem(w) for w in words_b if w not in STOPWORDS]
    # SequenceMatcher's ratio depends on argument order; a fixed order keeps the features symmetric. Characters are
    # compared in one script (`chinese_text.simplified`: English text passes unchanged), as the words are.
    low, high = sorted((chinese_text.simplified(first.lower()), chinese_text.simplified(second.lower())))
    sorted_low, sorted_high = sorted((" ".join(sorted(words_a)), " ".join(sorted(words_b))))
    return np.array(
        [
            jaccard,
            overlap,
            float(numbers_in(first) != numbers_in(second)),
            float(is_negated(first) != is_negated(second)),
            float(question_words_a != question_words_b),
            min(length_a, length_b) / max(length_a, length_b, 1),
            np.log1p(len(content_a ^ content_b)),
            np.log1p(abs(length_a - length_b)),
            _shared_word_order(stems_a, stems_b),
            SequenceMatcher(None, low, high, autojunk=False).ratio(),
            SequenceMatcher(None, sorted_low, sorted_high, autojunk=False).ratio(),
            float(bool(words_a) and bool(words_b) and words_a[0] == words_b[0]),
            float(bool(words_a) and bool(words_b) and words_a[-1] == words_b[-1]),
        ]
    )


# Names of the features the tenant verifiers' set (pair-v2) adds after pair-v1's, in `pair_extra_features`' order.
PAIR_V2_FEATURES = (
    "char_trigram_jaccard",
    "char_fivegram_jaccard",
    "word_bigram_jaccard",
    "fewer_words_on_one_side",
    "more_words_on_one_side",
    "names_differ",
    "first_question_word_differs",
)
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*")


def _character_grams(text: str, size: int) -> set[str]:
    joined = " ".join(words_read(text))
    return {joined[i : i + size] for i in range(max(len(joined) - size + 1, 1))}


def _jaccard(first: set, second: set) -> float:
    union = first | second
    return len(first & second) / len(union) if union else 1.0


def _names(text: str) -> set[str]:
    """Capitalised words after the first: the names a question is about ("Paris"), when its writer capitalises."""
    return {w.lower() for w in _NAME.findall(text)[1:] if w[0].isupper()}


def _first_question_word(text: str) -> str:
    return next((_ASKING[w] for w in words_read(text) if w in _ASKING), "")


def pair_extra_features(first: str, second: str) -> np.ndarray:
    """The text features pair-v2 adds (PAIR_V2_FEATURES), symmetric in the two questions: spelling-level overlap that
    survives typos and inflections, word pairs in common, how many content words each side has alone, and the names
    and the asking word (what vs how) each side uses: where a paraphrase and a different question part most often."""
    stems_a = [word_stem(w) for w in words_read(first)]
    stems_b = [word_stem(w) for w in words_read(second)]
    content_a, content_b = content_words(first), content_words(second)
    alone_a, alone_b = len(content_a - content_b), len(content_b - content_a)
    return np.array(
        [
            _jaccard(_character_grams(first, 3), _character_grams(second, 3)),
            _jaccard(_character_grams(first, 5), _character_grams(second, 5)),
            _jaccard(set(itertools.pairwise(stems_a)), set(itertools.pairwise(stems_b))),
            float(min(alone_a, alone_b)),
            float(max(alone_a, alone_b)),
            float(len(_names(first) ^ _names(second))),
            float(_first_question_word(first) != _first_question_word(second)),
        ]
    )


# Names of the features pair-v3 adds after pair-v2's, in `pair_order_features`' order: where the words of two questions
# sit, not only which they are. "Can a message say blocked if you were delivered" and "...say delivered if you were
# blocked" share every word and most word pairs; these see that the same words play other roles.
PAIR_V3_FEATURES = (
    "word_lcs_ratio",
    "shared_words_out_of_sequence",
    "word_context_jaccard",
    "word_displacement",
)


def _common_subsequence(first: Sequence[str], second: Sequence[str]) -> int:
    """Length of the longest common subsequence of two word lists (questions are short: quadratic is cheap)."""
    previous = [0] * (len(second) + 1)
    for word in first:
        current = [0]
        for j, other in enumerate(second):
            current.append(previous[j] + 1 if word == other else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def _contexts(words: Sequence[str]) -> set[tuple[str, str, str]]:
    """Each word with its left and right neighbour (sentence edges as "^" and "$")."""
    padded = ["^", *words, "$"]
    return {(padded[i - 1], padded[i], padded[i + 1]) for i in range(1, len(padded) - 1)}


def pair_order_features(first: str, second: str) -> np.ndarray:
    """The order features pair-v3 adds (PAIR_V3_FEATURES), symmetric in the two questions: the longest common word
    subsequence as a share of the longer question; the shared words (counted with repeats) that fall outside it, as
    a share (the same words in another order); the Jaccard of words taken with both neighbours; and how far, as a
    share of its question's length, a shared word moved."""
    words_a, words_b = words_read(first), words_read(second)
    longest = max(len(words_a), len(words_b), 1)
    sequence = _common_subsequence(words_a, words_b)
    shared = set(words_a) & set(words_b)
    bag = sum(min(words_a.count(w), words_b.count(w)) for w in shared)
    position_a = {w: i / max(len(words_a) - 1, 1) for i, w in enumerate(words_a)}
    position_b = {w: i / max(len(words_b) - 1, 1) for i, w in enumerate(words_b)}
    # fsum: a set's order changes with each process's string hashing, and a float sum with its order; a feature
    # that differs in its last bit between processes bins differently in the tree head, which then trains another
    # version from the same labels.
    moved = math.fsum(abs(position_a[w] - position_b[w]) for w in shared) / len(shared) if shared else 0.0
    return np.array(
        [
            sequence / longest,
            (bag - sequence) / longest,
            _jaccard(_contexts(words_a), _contexts(words_b)),
            moved,
        ]
    )


def pair_features(
    *,
    first: str,
    second: str,
    first_vector: np.ndarray,
    second_vector: np.ndarray,
    feature_version: str = FEATURE_VERSION,
) -> np.ndarray:
    """Features of a question pair for the duplicate head, in the spirit of SBERT's classification objective:
    u*v and |u-v| of the unit vectors, their cosine, then `pair_lexical_features` (pair-v1), and for pair-v2
    `pair_extra_features` after them, so a pair-v1 model reads a prefix of pair-v2's. Symmetric in the pair."""
    u = np.asarray(first_vector, dtype=np.float64)
    v = np.asarray(second_vector, dtype=np.float64)
    parts = [u * v, np.abs(u - v), [float(u @ v)], pair_lexical_features(first, second)]
    if feature_version in (TENANT_FEATURE_VERSION, ORDER_FEATURE_VERSION):
        parts.append(pair_extra_features(first, second))
    if feature_version == ORDER_FEATURE_VERSION:
        parts.append(pair_order_features(first, second))
    elif feature_version not in (FEATURE_VERSION, TENANT_FEATURE_VERSION):
        raise ValueError(f"unknown pair feature set {feature_version!r}")
    return np.concatenate(parts)


def pair_features_of(
    texts: Sequence[tuple[str, str]],
    *,
    first: np.ndarray,
    second: np.ndarray,
    feature_version: str = FEATURE_VERSION,
) -> np.ndarray:
    """`pair_features` of many pairs, one row each: `texts[i]` is pair i's two questions, `first[i]` and `second[i]`
    their vectors. The one loop training, the tenant verifiers and the benchmarks share, so each reads the features
    the decision computes."""
    if not (len(texts) == len(first) == len(second)):
        raise ValueError(f"{len(texts)} pairs but {len(first)} and {len(second)} vectors")
    if not texts:
        return np.zeros((0, pair_feature_count(first.shape[-1], feature_version=feature_version)))
    return np.stack(
        [
            pair_features(
                first=a, second=b, first_vector=first[i], second_vector=second[i], feature_version=feature_version
            )
            for i, (a, b) in enumerate(texts)
        ]
    )


def pair_feature_count(dimension: int, *, feature_version: str = FEATURE_VERSION) -> int:
    extra = {
        FEATURE_VERSION: 0,
        TENANT_FEATURE_VERSION: len(PAIR_V2_FEATURES),
        ORDER_FEATURE_VERSION: len(PAIR_V2_FEATURES) + len(PAIR_V3_FEATURES),
    }[feature_version]
    return 2 * dimension + 1 + len(LEXICAL_FEATURES) + extra
