"""Token-alignment features of a question pair, as bench/dedup_verifier_candidates.py measures them: how well each word
piece of one question finds its match among the other's, read from the embedding model's contextual token states (its
last hidden states before pooling). Pure functions, no model: the caller passes the token states. Measured and not
adopted by the tenant verifier (docs/conversations.md, "Learning from review").

Why: the pooled vector's cosine averages a question's words together, so one word that changes the question ("iPhone"
against "Android", "buy" against "sell") moves it little. Greedy max-cosine alignment (BERTScore's precision, recall
and F1) and the weakest aligned content word on each side see that one word. The features are symmetric in the pair,
as the duplicate head's other features are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from conversations.dedup.question_pairs import STOPWORDS

# Names of the features, in `alignment_features`' order (the verifier file lists them too).
ALIGNMENT_FEATURES = (
    "align_f1",
    "align_worse_side",
    "align_better_side",
    "align_idf_f1",
    "align_idf_worse_side",
    "weakest_content_worse_side",
    "weakest_content_better_side",
    "content_unaligned",
)
# A content word piece whose best match on the other side is below this cosine counts as unaligned.
UNALIGNED_BELOW = 0.6


def content_token(token: str) -> bool:
    """A word piece that carries content: letters or digits, not a stopword (continuation pieces count)."""
    piece = token[2:] if token.startswith("##") else token
    return piece.isalnum() and (token.startswith("##") or token not in STOPWORDS)


def idf_table(token_lists: Iterable[Sequence[str]]) -> dict[str, float]:
    """Inverse document frequency of each word piece over the questions given (a tenant's own), smoothed:
    log((n + 1) / (df + 1)) + 1, so a piece in every question weighs about 1 and a rare one more."""
    frequency: dict[str, int] = {}
    count = 0
    for tokens in token_lists:
        count += 1
        for token in set(tokens):
            frequency[token] = frequency.get(token, 0) + 1
    return {token: round(math.log((count + 1) / (df + 1)) + 1.0, 4) for token, df in frequency.items()}


def _weights(tokens: Sequence[str], idf: Mapping[str, float] | None) -> np.ndarray:
    """Each piece's weight: its idf, a piece the table never saw weighing as the rarest it saw; 1 without a table."""
    if not idf:
        return np.ones(len(tokens))
    unseen = max(idf.values())
    return np.array([idf.get(token, unseen) for token in tokens])


def alignment_features(
    *,
    first_states: np.ndarray,
    first_tokens: Sequence[str],
    second_states: np.ndarray,
    second_tokens: Sequence[str],
    idf: Mapping[str, float] | None = None,
) -> np.ndarray:
    """ALIGNMENT_FEATURES of a pair from each question's token states (one row per word piece, special tokens left
    out, any scale) and word pieces. A question with no word piece aligns with nothing (all features 0)."""
    if len(first_tokens) == 0 or len(second_tokens) == 0:
        return np.zeros(len(ALIGNMENT_FEATURES))
    a = np.asarray(first_states, dtype=np.float64)
    b = np.asarray(second_states, dtype=np.float64)
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    similarity = a @ b.T
    best_a, best_b = similarity.max(axis=1), similarity.max(axis=0)
    precision, recall = float(best_a.mean()), float(best_b.mean())
    weights_a, weights_b = _weights(first_tokens, idf), _weights(second_tokens, idf)
    idf_precision = float(best_a @ weights_a / weights_a.sum())
    idf_recall = float(best_b @ weights_b / weights_b.sum())
    content_a = np.array([content_token(t) for t in first_tokens], dtype=bool)
    content_b = np.array([content_token(t) for t in second_tokens], dtype=bool)
    weakest_a = float(best_a[content_a].min()) if content_a.any() else 1.0
    weakest_b = float(best_b[content_b].min()) if content_b.any() else 1.0
    unaligned = int((best_a[content_a] < UNALIGNED_BELOW).sum() + (best_b[content_b] < UNALIGNED_BELOW).sum())
    return np.array(
        [
            _f1(precision, recall),
            min(precision, recall),
            max(precision, recall),
            _f1(idf_precision, idf_recall),
            min(idf_precision, idf_recall),
            min(weakest_a, weakest_b),
            max(weakest_a, weakest_b),
            math.log1p(unaligned),
        ]
    )


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
