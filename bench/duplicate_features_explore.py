"""Exploration: which compact feature set for the duplicate head generalises (research record, not the trainer).

Compares feature sets for the logistic-regression head on the TRAIN split of ../shared/data/qqp only, by the
same procedure as bench/train_duplicate_model.py: penalty by the inner 5-fold CV, then gate and cut through the
decision rule on the out-of-fold probabilities, reporting the best out-of-fold precision at recall >= 0.42. Each
set is also fitted on the whole train split and run through the decision on our own support-desk sanity set
(tests/conversations/data/support_pairs.jsonl; never used for a choice). The held-out split is not read here:
it is measured once, by the trainer, for the set that ships.

Candidate signals besides the 13 lexical features and the cosine (none of them a coordinate of the vectors, so
none can learn which Quora topics are labelled duplicate):
  - soft word alignment on the bundled model's static word-piece input embeddings (a content word is the mean of
    its pieces' vectors, centred on the vocabulary mean): for each content word its best cosine on the other
    side; min, mean and count below a level, aggregated symmetrically;
  - the cosine of the words each side has and the other lacks (a synonym swap vs a substitution);
  - names (capitalised after the first word, letters glued to digits) and rare words (split into several word
    pieces) on one side only; content overlap weighted by word length;
  - cheap non-linearities (cosine squared, cosine x overlap, hinges of the cosine);
  - a probe only: IDF from the MTRAG and SciFact passages (evaluation data, so never shippable as is);
  - gradient-boosted trees (scikit-learn) on the compact set, for the ceiling of a non-linear head.

Outcome (2026-11, docs/conversations.md "Threshold choice"): the best compact logistic regression, 26 features
("27 with a word-sequence ratio ..."), reached out-of-fold P=0.834 against 0.845 for the 782-weight head and, measured
once on the held-out split, P=0.838 R=0.421 against 0.853 R=0.432: short of the ship rule (within 0.01), though
better on the support set (21 of 27 paraphrases served against 15, no near-miss served by either). Trees on the
same features matched the 782-weight head out of fold (0.845-0.849) with about 500 parameters.

Usage: .venv/bin/python bench/duplicate_features_explore.py [TITLE-SUBSTRING ...] [trees]
  (about 5 minutes on two cores for everything, embeddings cached in var/bench/)
"""

from __future__ import annotations

import json
import sys
import time
from functools import lru_cache
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import numpy as np  # noqa: E402
from qqp import ROOT, inner_fold, pairs_embed, pairs_load, precision_recall_hit  # noqa: E402
from train_duplicate_model import (  # noqa: E402  (sets up Django)
    GATES,
    PENALTIES,
    RECALL_FLOOR,
    best_precision_at_recall,
    logistic_fit,
    out_of_fold,
    probabilities,
    standardise,
)

from conversations import decisions  # noqa: E402
from retrieval.embeddings import embed_texts, embedding_model, tokenizer  # noqa: E402

SUPPORT_PAIRS = ROOT / "tests" / "conversations" / "data" / "support_pairs.jsonl"
WEAK_MATCH = 0.45  # a content word whose best match on the other side is below this has no counterpart


class WordVectors:
    """Static vector of a word: mean of its word pieces' input embeddings, centred on the vocabulary mean, unit."""

    def __init__(self) -> None:
        matrix = embedding_model()[0].auto_model.embeddings.word_embeddings.weight.detach().cpu().numpy()
        self.matrix = matrix.astype(np.float64)
        self.centre = self.matrix.mean(axis=0)
        self.tokenizer = tokenizer()

    @lru_cache(maxsize=200_000)  # noqa: B019  (one instance per run)
    def vector(self, word: str) -> np.ndarray:
        ids = self.tokenizer.encode(word, add_special_tokens=False).ids
        vector = (self.matrix[ids] - self.centre).mean(axis=0)
        return vector / (np.linalg.norm(vector) or 1.0)


def ordered_content_words(text: str) -> list[str]:
    seen = dict.fromkeys(
        w for w in decisions._words(text) if w not in decisions.STOPWORDS and w not in decisions._NEGATIONS
    )
    return [w for w in seen if not decisions.numbers_in(w)]


ALIGN_NAMES = (
    "align_min",
    "align_mean",
    "align_mean_low",
    "log_weak_words",
    "unmatched_cosine",
    "unmatched_both_sides",
)


def align_features(first: str, second: str, words: WordVectors) -> np.ndarray:
    a, b = ordered_content_words(first), ordered_content_words(second)
    if not a or not b:
        same = float(not a and not b)
        return np.array([same, same, same, np.log1p(len(a) + len(b)), same, 0.0])
    va = np.stack([words.vector(w) for w in a])
    vb = np.stack([words.vector(w) for w in b])
    similarity = va @ vb.T
    best_a, best_b = similarity.max(axis=1), similarity.max(axis=0)
    weak = int((best_a < WEAK_MATCH).sum() + (best_b < WEAK_MATCH).sum())
    stems_a = {decisions._stem(w) for w in a}
    stems_b = {decisions._stem(w) for w in b}
    only_a = [i for i, w in enumerate(a) if decisions._stem(w) not in stems_b]
    only_b = [i for i, w in enumerate(b) if decisions._stem(w) not in stems_a]
    if only_a and only_b:
        ra, rb = va[only_a].sum(axis=0), vb[only_b].sum(axis=0)
        unmatched = float(ra @ rb / (np.linalg.norm(ra) * np.linalg.norm(rb) or 1.0))
        both = 1.0
    else:
        unmatched, both = (1.0 if not only_a and not only_b else 0.0), 0.0
    return np.array(
        [
            min(best_a.min(), best_b.min()),
            (best_a.mean() + best_b.mean()) / 2,
            min(best_a.mean(), best_b.mean()),
            np.log1p(weak),
            unmatched,
            both,
        ]
    )


def names_in(text: str) -> set[str]:
    """Words that name a thing: capitalised past the first word, or letters glued to digits ("Slack", "2FA")."""
    names = set()
    for position, word in enumerate(text.replace("\u2019", "'").split()):
        token = "".join(ch for ch in word if ch.isalnum())
        if not token:
            continue
        lowered = token.lower()
        if lowered in decisions.STOPWORDS or lowered in decisions._NEGATIONS:
            continue
        glued = any(ch.isdigit() for ch in token) and any(ch.isalpha() for ch in token)
        if glued or (position > 0 and token[0].isupper() and lowered != "i"):
            names.add(decisions._stem(lowered))
    return names


IDF: dict[str, float] = {}


def idf_load() -> None:
    """Exploration only: word IDF over the MTRAG and SciFact passages (evaluation data; never shipped)."""
    documents = 0
    counts: dict[str, int] = {}
    for name in ("mtrag/corpus.jsonl", "scifact/corpus.jsonl"):
        for line in (ROOT.parent / "shared" / "data" / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                documents += 1
                for w in {decisions._stem(w) for w in decisions._words(json.loads(line)["text"])}:
                    counts[w] = counts.get(w, 0) + 1
    IDF.update({w: float(np.log((documents + 1) / (c + 1))) for w, c in counts.items()})
    IDF[""] = float(np.log(documents + 1))


def rarity_features(first: str, second: str, words: WordVectors) -> np.ndarray:
    a, b = decisions.content_words(first), decisions.content_words(second)
    only = a ^ b
    names_a, names_b = names_in(first), names_in(second)
    names_only = {n for n in names_a ^ names_b if n not in a or n not in b}
    multi_piece = [w for w in only if len(words.tokenizer.encode(w, add_special_tokens=False).ids) >= 2]
    weight = {w: len(w) for w in a | b}
    union = sum(weight[w] for w in a | b)
    length_jaccard = sum(weight[w] for w in a & b) / union if union else 1.0
    top = IDF[""]
    idf = {w: IDF.get(w, top) for w in a | b}
    idf_union = sum(idf.values())
    idf_jaccard = sum(idf[w] for w in a & b) / idf_union if idf_union else 1.0
    idf_only = max((idf[w] for w in only), default=0.0)
    return np.array(
        [
            np.log1p(len(names_only)),
            float(bool(names_a or names_b) and names_a != names_b),
            np.log1p(len(multi_piece)),
            length_jaccard,
            idf_jaccard,
            idf_only,
        ]
    )


RARITY_NAMES = ("log_names_on_one_side", "names_differ", "log_rare_words_on_one_side", "length_jaccard")
IDF_NAMES = ("idf_jaccard", "max_idf_on_one_side")


def word_sequence_ratio(first: str, second: str) -> float:
    """SequenceMatcher's ratio on the word sequences (a tenth of the cost of the character ratio)."""
    from difflib import SequenceMatcher

    low, high = sorted((decisions._words(first), decisions._words(second)))
    return SequenceMatcher(None, low, high, autojunk=False).ratio()


def columns_of(rows: list[dict], first: np.ndarray, second: np.ndarray, words: WordVectors) -> dict[str, np.ndarray]:
    """Every candidate column, by name (u*v and |u-v| as two blocks)."""
    cosine = (first * second).sum(axis=1)
    lexical = np.stack([decisions.pair_lexical_features(r["question1"], r["question2"]) for r in rows])
    align = np.stack([align_features(r["question1"], r["question2"], words) for r in rows])
    columns = {"cosine": cosine[:, None], "uv": first * second, "absdiff": np.abs(first - second)}
    for i, name in enumerate(decisions.LEXICAL_FEATURES):
        columns[name] = lexical[:, i : i + 1]
    for i, name in enumerate(ALIGN_NAMES):
        columns[name] = align[:, i : i + 1]
    rarity = np.stack([rarity_features(r["question1"], r["question2"], words) for r in rows])
    for i, name in enumerate((*RARITY_NAMES, *IDF_NAMES)):
        columns[name] = rarity[:, i : i + 1]
    columns["word_sequence_ratio"] = np.array([[word_sequence_ratio(r["question1"], r["question2"])] for r in rows])
    columns["cosine_squared"] = cosine[:, None] ** 2
    columns["cosine_x_overlap"] = cosine[:, None] * columns["content_overlap"]
    columns["cosine_x_align_mean"] = cosine[:, None] * columns["align_mean"]
    for knot in COSINE_KNOTS:
        columns[f"cosine_above_{knot:.2f}"] = np.maximum(cosine[:, None] - knot, 0.0)
    columns["align_mean_above_0.70"] = np.maximum(columns["align_mean"] - 0.70, 0.0)
    columns["cosine_x_question_words_differ"] = cosine[:, None] * columns["question_words_differ"]
    return columns


COSINE_KNOTS = (0.80, 0.88, 0.94)
LEX = list(decisions.LEXICAL_FEATURES)
ALIGN = list(ALIGN_NAMES)
NONLINEAR = ["cosine_squared", "cosine_x_overlap", "cosine_x_align_mean"]
RARITY = list(RARITY_NAMES)
IDF_COLUMNS = list(IDF_NAMES)
FEATURE_SETS = {
    "v1: u*v, |u-v|, cosine, lexical (782)": ["uv", "absdiff", "cosine", *LEX],
    "cosine + lexical (14)": ["cosine", *LEX],
    "cosine + lexical + alignment (20)": ["cosine", *LEX, *ALIGN],
    "cosine + lexical + non-linear (17)": ["cosine", *LEX, *NONLINEAR],
    "cosine + lexical + alignment + non-linear (23)": ["cosine", *LEX, *ALIGN, *NONLINEAR],
    "alignment without unmatched cosine (21)": [
        "cosine",
        *LEX,
        *[n for n in ALIGN if not n.startswith("unmatched")],
        *NONLINEAR,
    ],
    "cosine + lexical + rarity (18)": ["cosine", *LEX, *RARITY],
    "cosine + lexical + alignment + non-linear + rarity (27)": ["cosine", *LEX, *ALIGN, *NONLINEAR, *RARITY],
    "27 + cosine hinges (30)": [
        "cosine",
        *LEX,
        *ALIGN,
        *NONLINEAR,
        *RARITY,
        *[f"cosine_above_{k:.2f}" for k in COSINE_KNOTS],
    ],
    "27 + hinges + interactions (32)": [
        "cosine",
        *LEX,
        *ALIGN,
        *NONLINEAR,
        *RARITY,
        *[f"cosine_above_{k:.2f}" for k in COSINE_KNOTS],
        "align_mean_above_0.70",
        "cosine_x_question_words_differ",
    ],
    "27 without the character ratio (26)": [
        "cosine",
        *[n for n in LEX if n != "character_ratio"],
        *ALIGN,
        *NONLINEAR,
        *RARITY,
    ],
    "27 without the sorted-word ratio (26)": [
        "cosine",
        *[n for n in LEX if n != "sorted_word_ratio"],
        *ALIGN,
        *NONLINEAR,
        *RARITY,
    ],
    "27 without both string ratios (25)": [
        "cosine",
        *[n for n in LEX if not n.endswith("_ratio") or n == "length_ratio"],
        *ALIGN,
        *NONLINEAR,
        *RARITY,
    ],
    "27 with a word-sequence ratio for both string ratios (26)": [
        "cosine",
        *[n for n in LEX if not n.endswith("_ratio") or n == "length_ratio"],
        "word_sequence_ratio",
        *ALIGN,
        *NONLINEAR,
        *RARITY,
    ],
    "probe, not shippable: + IDF from MTRAG/SciFact (29)": ["cosine", *LEX, *ALIGN, *NONLINEAR, *RARITY, *IDF_COLUMNS],
}
COMPACT_PENALTIES = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)


def matrix_of(columns: dict[str, np.ndarray], names: list[str]) -> np.ndarray:
    return np.hstack([columns[n] for n in names])


def decision_checks(rows: list[dict], second: np.ndarray) -> np.ndarray:
    """Conflicts and the follow-up guard (no previous turn), the parts of the decision other than gate and head."""
    return np.array(
        [
            not decisions.questions_conflict(r["question1"], r["question2"])
            and decisions.followup_context_matches(
                question=r["question1"],
                previous_vector=None,
                candidate=decisions.StoredQuestion(0, r["question2"], second[i], 0, None),
                threshold=1.0,
            )
            for i, r in enumerate(rows)
        ]
    )


def choose(features, labels, folds, cosine, checks):  # noqa: ANN001, ANN201
    """Penalty, gate and cut as the trainer chooses them; the out-of-fold figures at that choice."""
    grid = PENALTIES if features.shape[1] > 100 else COMPACT_PENALTIES
    by_penalty = {p: out_of_fold(features, labels, folds, penalty=p) for p in grid}
    penalty = max(grid, key=lambda p: best_precision_at_recall(by_penalty[p], labels, RECALL_FLOOR)[0])
    oof = by_penalty[penalty]
    choices = []
    for gate in GATES:
        eligible = (cosine >= gate) & checks
        precision, cut = best_precision_at_recall(np.where(eligible, oof, -1.0), labels, RECALL_FLOOR)
        if not np.isnan(cut) and cut >= 0:
            choices.append((precision, gate, cut))
    _, gate, cut = max(choices, key=lambda c: (round(c[0], 3), c[1]))
    figures = precision_recall_hit((cosine >= gate) & checks & (oof >= cut), labels)
    return penalty, gate, cut, figures, oof


TREE_SETS = ("cosine + lexical + alignment + non-linear + rarity (27)",)
TREE_CONFIGS = ((30, 2), (50, 2), (50, 3), (100, 2), (100, 3))  # (trees, depth), learning rate 0.1


def tree_out_of_fold(features, labels, folds, *, trees: int, depth: int) -> np.ndarray:  # noqa: ANN001
    from sklearn.ensemble import GradientBoostingClassifier

    predicted = np.zeros(len(labels))
    for fold in range(5):
        fit_on = folds != fold
        model = GradientBoostingClassifier(n_estimators=trees, max_depth=depth, learning_rate=0.1, random_state=0)
        model.fit(features[fit_on], labels[fit_on])
        predicted[~fit_on] = model.predict_proba(features[~fit_on])[:, 1]
    return predicted


def main() -> None:
    pairs = pairs_load()
    first, second = pairs_embed(pairs)
    train = pairs.train
    rows = [r for r, t in zip(pairs.rows, train, strict=True) if t]
    first, second = first[train], second[train]
    labels = pairs.labels[train]
    folds = np.array([inner_fold(r["pair_id"]) for r in rows])
    words = WordVectors()
    idf_load()
    started = time.perf_counter()
    columns = columns_of(rows, first, second, words)
    elapsed = time.perf_counter() - started
    print(f"train split: {len(rows)} pairs ({int(labels.sum())} duplicates); columns in {elapsed:.0f}s")
    cosine = columns["cosine"][:, 0]
    checks = decision_checks(rows, second)

    support = [json.loads(line) for line in SUPPORT_PAIRS.read_text(encoding="utf-8").splitlines() if line.strip()]
    s_first = embed_texts([r["question1"] for r in support])
    s_second = embed_texts([r["question2"] for r in support])
    s_columns = columns_of(support, s_first, s_second, words)
    s_labels = np.array([r["is_duplicate"] for r in support])
    s_cosine = s_columns["cosine"][:, 0]
    s_checks = decision_checks(support, s_second)

    print(
        f"\n{'feature set':<48} {'n':>4} {'penalty':>7} {'gate':>5} {'cut':>6} | OOF P     R | support acc  para  miss"
    )
    only = sys.argv[1:]  # substrings of the titles to run (all when none)
    for title, names in FEATURE_SETS.items():
        if only and not any(o in title for o in only):
            continue
        features = matrix_of(columns, names)
        penalty, gate, cut, figures, _ = choose(features, labels, folds, cosine, checks)
        mean, scale = standardise(features)
        weights, bias = logistic_fit((features - mean) / scale, labels, penalty=penalty)
        s_probability = probabilities(matrix_of(s_columns, names), weights, bias, mean, scale)
        s_hit = (s_cosine >= gate) & s_checks & (s_probability >= cut)
        accuracy = float((s_hit == (s_labels == 1)).mean())
        served = int((s_hit & (s_labels == 1)).sum())
        wrongly = int((s_hit & (s_labels == 0)).sum())
        paraphrases, near_misses = int(s_labels.sum()), int((s_labels == 0).sum())
        print(
            f"{title:<48} {features.shape[1]:>4} {penalty:>7g} {gate:>5.2f} {cut:>6.3f} | {figures[0]:.3f} "
            f"{figures[1]:.3f} | {accuracy:>11.3f} {served:>2}/{paraphrases} {wrongly:>2}/{near_misses}"
        )
    print("\ngradient-boosted trees (scikit-learn, exploration only), same folds, gate and cut by the decision rule:")
    for title in TREE_SETS if not only or "trees" in only else ():
        features = matrix_of(columns, FEATURE_SETS[title])
        for trees, depth in TREE_CONFIGS:
            oof = tree_out_of_fold(features, labels, folds, trees=trees, depth=depth)
            best = max(
                best_precision_at_recall(np.where((cosine >= g) & checks, oof, -1.0), labels, RECALL_FLOOR)[0]
                for g in GATES
            )
            print(f"  {title}, {trees} trees of depth {depth}: OOF P {best:.3f} at R >= {RECALL_FLOOR}")


if __name__ == "__main__":
    main()
