"""Exploration: contextual token alignment (BERTScore-style) for the duplicate head (research record, not the trainer).

bench/duplicate_features_explore.py tried static word-piece alignment, names, rare words and trees; none passed
~0.85 out of fold. This script tries the one signal left in the bundled model: its contextual token embeddings (the
last layer, before the mean pooling that makes the sentence vector). For a pair, the cosine matrix between the two
questions' tokens ([CLS]/[SEP] dropped; "content" = not punctuation, not a stop word) gives:
  - BERTScore precision / recall / F on content tokens (as the lower side, the higher side and F: symmetric),
    and F on all tokens (stop words included);
  - the worst best match (min over tokens of their best cosine on the other side) and the mean of the two worst:
    a word with no counterpart ("Python" vs "Java") that the sentence cosine averages away;
  - how many content tokens have their best match below WEAK_LEVELS (log1p);
  - the cosine of the mean-pooled unmatched tokens of each side (a synonym swap vs a substitution), and whether both
    sides have some;
  - products with the sentence cosine (cheap non-linearity).

Same procedure as bench/train_duplicate_model.py, on the TRAIN split only: penalty by the inner 5-fold CV, then gate
and cut through the decision rule on the out-of-fold probabilities, reporting the best out-of-fold precision at
recall >= 0.42 (functions reused from the trainer and bench/duplicate_features_explore.py). Sets compared:
  a) the shipped set (u*v, |u-v|, cosine, 13 lexical: pair-v1, 782 features);
  b) the shipped set + alignment;
  c) the compact set: cosine + lexical + alignment (no vector coordinates);
  d) gradient-boosted trees on (c), for the ceiling of a non-linear head.
The held-out split is read once, at the end, for the single best logistic candidate among (b) and (c) by out-of-fold
precision (the shipped head's held-out figures are P=0.853 R=0.432). Nothing is tuned on it.

Outcome (2026-11-29, two cores): it does not help. Out of fold at recall >= 0.42: a) 0.845 (reproduces the shipped
head), b) 0.844, b) + cosine products 0.844, c) 0.827, c) + products 0.833 (cosine + lexical alone: 0.823), trees on
c) 0.837-0.848 (on cosine + lexical alone: 0.833-0.844). The held-out split, measured once for the best candidate
(b + products, penalty 1000, gate 0.76): P=0.850 R=0.427 against the shipped head's 0.853 / 0.432. Inside the gate
(cosine >= 0.76, 3,595 train pairs) the best alignment column, the worst best match, separates duplicates with AUC
0.62 against 0.67 for the sentence cosine it largely repeats. Centring the token vectors on their mean (a one-off
probe, not kept here) changed nothing (compact set 0.833 either way). Cost had it helped: re-encoding the stored
question in a batch of two, 13-14 ms against 10-12 ms for today's single-question call on a quiet machine (41 vs
35 ms under another job's load), so about +3 to +6 ms a decision; or ~10 KiB float16 per stored question (13 tokens
on average) to keep its tokens; the features themselves take 0.3 ms.

Token embeddings of the 23,530 questions are cached under var/bench/ (float16, compressed npz keyed by the data's
hash and the model's name). The script also times encode([q]) against encode([q, stored]) for the decision-time cost.

Usage: .venv/bin/python bench/duplicate_align_explore.py [--no-held-out] [--no-trees] [--no-timing] [--timing-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import numpy as np  # noqa: E402
from duplicate_features_explore import (  # noqa: E402  (sets up Django through the trainer)
    SUPPORT_PAIRS,
    TREE_CONFIGS,
    choose,
    decision_checks,
    tree_out_of_fold,
)
from qqp import ROOT, inner_fold, pairs_embed, pairs_load, precision_recall_hit  # noqa: E402
from train_duplicate_model import (  # noqa: E402
    GATES,
    RECALL_FLOOR,
    best_precision_at_recall,
    logistic_fit,
    probabilities,
    standardise,
)

from conversations import decisions  # noqa: E402
from retrieval.embeddings import embed_texts, embedding_model, model_name  # noqa: E402

WEAK_LEVELS = (0.4, 0.5, 0.6)
UNMATCHED_LEVEL = 0.5  # a content token whose best match is below this has no counterpart
_SKIP_WORDS = decisions.STOPWORDS | decisions._NEGATIONS


# --- contextual token embeddings ---------------------------------------------------------------------------------


class Tokens:
    """Per question: unit contextual token vectors (no [CLS]/[SEP]) and a mask of the content tokens."""

    def __init__(self, vectors: np.ndarray, content: np.ndarray, offsets: np.ndarray) -> None:
        self.vectors, self.content, self.offsets = vectors, content, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def of(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        start, end = self.offsets[index], self.offsets[index + 1]
        return self.vectors[start:end], self.content[start:end]


def content_mask(input_ids: list[int], word_ids: list[int | None], tokenizer) -> np.ndarray:  # noqa: ANN001
    """Content tokens: word pieces of a word (the BERT pre-tokenizer's words) that has a letter or digit and is
    not a stop word or a negation. Special tokens are dropped by the caller."""
    pieces = tokenizer.convert_ids_to_tokens(input_ids)
    words: dict[int, str] = {}
    for piece, word in zip(pieces, word_ids, strict=True):
        if word is not None:
            words[word] = words.get(word, "") + piece.removeprefix("##")
    keep = []
    for word in word_ids:
        if word is None:
            continue
        text = words[word]
        keep.append(any(ch.isalnum() for ch in text) and text not in _SKIP_WORDS)
    return np.array(keep, dtype=bool)


def tokens_encode(texts: list[str], *, chunk: int = 1024, progress: bool = True) -> Tokens:
    model = embedding_model()
    tokenizer = model.tokenizer
    vectors, masks, lengths = [], [], []
    started = time.perf_counter()
    for begin in range(0, len(texts), chunk):
        batch = texts[begin : begin + chunk]
        outputs = model.encode(batch, output_value="token_embeddings", batch_size=64, show_progress_bar=False)
        encoded = tokenizer(batch, truncation=True, max_length=model.max_seq_length)
        for i, output in enumerate(outputs):
            matrix = output.float().numpy()
            ids = encoded["input_ids"][i]
            if len(ids) != len(matrix):
                raise RuntimeError(f"token count mismatch for {batch[i]!r}: {len(ids)} ids, {len(matrix)} vectors")
            matrix = matrix[1:-1]  # [CLS] ... [SEP]
            matrix = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-9)
            vectors.append(matrix.astype(np.float16))
            masks.append(content_mask(ids, encoded.word_ids(i), tokenizer))
            lengths.append(len(matrix))
        if progress:
            done = min(begin + chunk, len(texts))
            elapsed = time.perf_counter() - started
            print(
                f"  token embeddings {done}/{len(texts)} in {elapsed:.0f}s "
                f"(~{elapsed / done * (len(texts) - done):.0f}s left)",
                flush=True,
            )
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return Tokens(np.concatenate(vectors), np.concatenate(masks), offsets)


def pairs_tokens(pairs) -> Tokens:  # noqa: ANN001
    """Token embeddings of question1 (indices 0..n-1) then question2 (n..2n-1) of every pair, cached."""
    cache = ROOT / "var" / "bench" / f"qqp-tokens-{pairs.data_sha256[:16]}-{len(pairs.rows)}-{model_name()}.npz"
    if cache.exists():
        stored = np.load(cache)
        return Tokens(stored["vectors"], stored["content"], stored["offsets"])
    texts = [r["question1"] for r in pairs.rows] + [r["question2"] for r in pairs.rows]
    print(f"encoding the token embeddings of {len(texts)} questions (cached in {cache.name})")
    tokens = tokens_encode(texts)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(cache, vectors=tokens.vectors, content=tokens.content, offsets=tokens.offsets)
    print(f"  cache {cache.stat().st_size / 2**20:.0f} MiB")
    return tokens


# --- alignment features --------------------------------------------------------------------------------------------

ALIGN_NAMES = (
    "bertscore_low",
    "bertscore_high",
    "bertscore_f",
    "bertscore_f_all_tokens",
    "worst_match",
    "worst_two_mean",
    *(f"log_weak_below_{level:.1f}" for level in WEAK_LEVELS),
    "unmatched_cosine",
    "unmatched_both_sides",
)
CROSS_NAMES = ("cosine_x_bertscore_f", "cosine_x_worst_match")


def _best_matches(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    similarity = a @ b.T
    return similarity, similarity.max(axis=1), similarity.max(axis=0)


def _f(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def align_features(first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Alignment features of a pair (ALIGN_NAMES order), symmetric in the two questions."""
    (va, ca), (vb, cb) = first, second
    va, vb = va.astype(np.float32), vb.astype(np.float32)
    if len(va) == 0 or len(vb) == 0:
        return np.zeros(len(ALIGN_NAMES))
    _, all_a, all_b = _best_matches(va, vb)
    f_all = _f(float(all_a.mean()), float(all_b.mean()))
    # Content tokens; a side with none (a question of stop words only) falls back to all its tokens.
    a = va[ca] if ca.any() else va
    b = vb[cb] if cb.any() else vb
    _, best_a, best_b = _best_matches(a, b)
    p, r = float(best_a.mean()), float(best_b.mean())
    best = np.sort(np.concatenate([best_a, best_b]))
    weak = [np.log1p(int((best < level).sum())) for level in WEAK_LEVELS]
    only_a, only_b = best_a < UNMATCHED_LEVEL, best_b < UNMATCHED_LEVEL
    if only_a.any() and only_b.any():
        ra, rb = a[only_a].sum(axis=0), b[only_b].sum(axis=0)
        unmatched = float(ra @ rb / (np.linalg.norm(ra) * np.linalg.norm(rb) or 1.0))
        both = 1.0
    else:
        unmatched, both = (1.0 if not only_a.any() and not only_b.any() else 0.0), 0.0
    return np.array(
        [
            min(p, r),
            max(p, r),
            _f(p, r),
            f_all,
            float(best[0]),
            float(best[:2].mean()),
            *weak,
            unmatched,
            both,
        ]
    )


def columns_of(rows: list[dict], first, second, tokens_first, tokens_second) -> dict[str, np.ndarray]:  # noqa: ANN001
    """Every candidate column by name; tokens_first/second(i) give the (vectors, content) of pair i's questions."""
    cosine = (first * second).sum(axis=1)
    lexical = np.stack([decisions.pair_lexical_features(r["question1"], r["question2"]) for r in rows])
    align = np.stack([align_features(tokens_first(i), tokens_second(i)) for i in range(len(rows))])
    columns = {"cosine": cosine[:, None], "uv": first * second, "absdiff": np.abs(first - second)}
    for i, name in enumerate(decisions.LEXICAL_FEATURES):
        columns[name] = lexical[:, i : i + 1]
    for i, name in enumerate(ALIGN_NAMES):
        columns[name] = align[:, i : i + 1]
    columns["cosine_x_bertscore_f"] = cosine[:, None] * columns["bertscore_f"]
    columns["cosine_x_worst_match"] = cosine[:, None] * columns["worst_match"]
    return columns


LEX = list(decisions.LEXICAL_FEATURES)
ALIGN = list(ALIGN_NAMES)
CROSS = list(CROSS_NAMES)
SHIPPED = ["uv", "absdiff", "cosine", *LEX]
FEATURE_SETS = {
    "a) shipped: u*v, |u-v|, cosine, lexical (782)": SHIPPED,
    "b) shipped + alignment (793)": [*SHIPPED, *ALIGN],
    "b') shipped + alignment + cross (795)": [*SHIPPED, *ALIGN, *CROSS],
    "c) cosine + lexical + alignment (25)": ["cosine", *LEX, *ALIGN],
    "c') cosine + lexical + alignment + cross (27)": ["cosine", *LEX, *ALIGN, *CROSS],
    "   probe: cosine + alignment only (12)": ["cosine", *ALIGN],
    "   probe: cosine + lexical (14)": ["cosine", *LEX],
}
CANDIDATES = ("b)", "b')", "c)", "c')")  # the sets eligible for the one held-out measurement
TREE_SETS = ("c) cosine + lexical + alignment (25)", "   probe: cosine + lexical (14)")


def matrix_of(columns: dict[str, np.ndarray], names: list[str]) -> np.ndarray:
    return np.hstack([columns[n] for n in names])


# --- decision-time cost ----------------------------------------------------------------------------------------------


def encode_timings(rows: list[dict], repeats: int = 50) -> None:
    """Median wall time of what the decision would have to run: today one sentence vector of the new question;
    with alignment, the token embeddings of the new question and of the stored one (re-encoded in a batch of two,
    or read from storage), then the alignment features. The variants run interleaved, pair by pair, so a change in
    the machine's load touches them alike."""
    import os

    model = embedding_model()
    tokenizer = model.tokenizer
    sample = [(r["question1"], r["question2"]) for r in rows[:repeats]]
    for q, stored in sample[:5]:  # warm-up
        model.encode([q, stored], output_value=None, show_progress_bar=False)

    def sides_of(q: str, stored: str) -> list[tuple[np.ndarray, np.ndarray]]:
        out = model.encode([q, stored], output_value=None, show_progress_bar=False)
        sides = []
        for text, o in zip((q, stored), out, strict=True):
            encoded = tokenizer(text)
            length = int(o["attention_mask"].sum())  # a batch of two is padded to its longer question
            vectors = o["token_embeddings"].float().numpy()[1 : length - 1]
            vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
            sides.append((vectors, content_mask(encoded["input_ids"], encoded.word_ids(), tokenizer)))
        return sides

    prepared = [sides_of(q, stored) for q, stored in sample]
    variants = {
        "embed_texts([q]): sentence vector (today)": lambda i, q, s: embed_texts([q]),
        "encode([q]): sentence + tokens (stored tokens kept)": lambda i, q, s: model.encode(
            [q], output_value=None, show_progress_bar=False
        ),
        "encode([q, stored]): sentence + tokens (re-encode)": lambda i, q, s: model.encode(
            [q, s], output_value=None, show_progress_bar=False
        ),
        "embed_texts([q, stored]): sentence vectors only": lambda i, q, s: embed_texts([q, s]),
        "alignment features, tokens given": lambda i, q, s: align_features(*prepared[i]),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    load_before = os.getloadavg()[0]
    for i, (q, stored) in enumerate(sample):
        names = list(variants)
        for name in names[i % len(names) :] + names[: i % len(names)]:
            started = time.perf_counter()
            variants[name](i, q, stored)
            times[name].append((time.perf_counter() - started) * 1000)
    lengths = [len(tokenizer(q)["input_ids"]) - 2 for q, _ in sample]
    print(
        f"\ndecision-time cost (median of {len(sample)} QQP pairs, {model.device}, {torch_threads()} torch threads, "
        f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}):"
    )
    for name, values in times.items():
        print(f"  {name:<54} {statistics.median(values):7.1f} ms")
    mean_tokens = float(np.mean(lengths))
    print(
        f"  storage if kept: ~{mean_tokens:.0f} tokens x 384 x 2 bytes (float16) = "
        f"{mean_tokens * 384 * 2 / 1024:.1f} KiB per stored question vs 1.5 KiB for its vector"
    )


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


# --- main ------------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-held-out", action="store_true")
    parser.add_argument("--no-trees", action="store_true")
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--timing-only", action="store_true")
    args = parser.parse_args()
    if args.timing_only:
        pairs = pairs_load()
        encode_timings([r for r, t in zip(pairs.rows, pairs.train, strict=True) if t])
        return

    pairs = pairs_load()
    n = len(pairs.rows)
    first_all, second_all = pairs_embed(pairs)
    started = time.perf_counter()
    tokens = pairs_tokens(pairs)
    print(f"token embeddings ready in {time.perf_counter() - started:.0f}s ({len(tokens.vectors)} tokens)")

    started = time.perf_counter()
    all_columns = columns_of(pairs.rows, first_all, second_all, lambda i: tokens.of(i), lambda i: tokens.of(n + i))
    print(f"columns for all {n} pairs in {time.perf_counter() - started:.0f}s")
    all_checks = decision_checks(pairs.rows, second_all)

    train = pairs.train
    rows = [r for r, t in zip(pairs.rows, train, strict=True) if t]
    columns = {name: value[train] for name, value in all_columns.items()}
    labels = pairs.labels[train]
    folds = np.array([inner_fold(r["pair_id"]) for r in rows])
    cosine = columns["cosine"][:, 0]
    checks = all_checks[train]
    print(f"train split: {len(rows)} pairs ({int(labels.sum())} duplicates); the held-out split is not read here")

    support = [json.loads(line) for line in SUPPORT_PAIRS.read_text(encoding="utf-8").splitlines() if line.strip()]
    s_first = embed_texts([r["question1"] for r in support])
    s_second = embed_texts([r["question2"] for r in support])
    s_tokens = tokens_encode([r["question1"] for r in support] + [r["question2"] for r in support], progress=False)
    s_columns = columns_of(
        support, s_first, s_second, lambda i: s_tokens.of(i), lambda i: s_tokens.of(len(support) + i)
    )
    s_labels = np.array([r["is_duplicate"] for r in support])
    s_cosine = s_columns["cosine"][:, 0]
    s_checks = decision_checks(support, s_second)

    print("\nalignment columns on the train split, mean for duplicates / non-duplicates:")
    for name in (*ALIGN_NAMES, *CROSS_NAMES):
        values = columns[name][:, 0]
        print(f"  {name:<24} {values[labels == 1].mean():.3f} / {values[labels == 0].mean():.3f}")

    print(
        f"\n{'feature set':<48} {'n':>4} {'penalty':>7} {'gate':>5} {'cut':>6} | OOF P     R | support acc  para  miss"
    )
    chosen: dict[str, tuple] = {}
    for title, names in FEATURE_SETS.items():
        features = matrix_of(columns, names)
        penalty, gate, cut, figures, _ = choose(features, labels, folds, cosine, checks)
        chosen[title] = (penalty, gate, cut, figures)
        mean, scale = standardise(features)
        weights, bias = logistic_fit((features - mean) / scale, labels, penalty=penalty)
        s_probability = probabilities(matrix_of(s_columns, names), weights, bias, mean, scale)
        s_hit = (s_cosine >= gate) & s_checks & (s_probability >= cut)
        accuracy = float((s_hit == (s_labels == 1)).mean())
        served = int((s_hit & (s_labels == 1)).sum())
        wrongly = int((s_hit & (s_labels == 0)).sum())
        print(
            f"{title:<48} {features.shape[1]:>4} {penalty:>7g} {gate:>5.2f} {cut:>6.3f} | {figures[0]:.3f} "
            f"{figures[1]:.3f} | {accuracy:>11.3f} {served:>2}/{int(s_labels.sum())} "
            f"{wrongly:>2}/{int((s_labels == 0).sum())}",
            flush=True,
        )

    if not args.no_trees:
        print(
            "\nd) gradient-boosted trees (scikit-learn, ceiling only), same folds, gate and cut by the decision rule:"
        )
        for title in TREE_SETS:
            features = matrix_of(columns, FEATURE_SETS[title])
            for trees, depth in TREE_CONFIGS:
                oof = tree_out_of_fold(features, labels, folds, trees=trees, depth=depth)
                best = max(
                    best_precision_at_recall(np.where((cosine >= g) & checks, oof, -1.0), labels, RECALL_FLOOR)[0]
                    for g in GATES
                )
                print(f"  {title.strip()}, {trees} trees of depth {depth}: OOF P {best:.3f} at R >= {RECALL_FLOOR}")

    if not args.no_held_out:
        best_title = max((t for t in FEATURE_SETS if t.startswith(CANDIDATES)), key=lambda t: chosen[t][3][0])
        penalty, gate, cut, _ = chosen[best_title]
        names = FEATURE_SETS[best_title]
        features = matrix_of(columns, names)
        mean, scale = standardise(features)
        weights, bias = logistic_fit((features - mean) / scale, labels, penalty=penalty)
        held = pairs.held_out
        probability = probabilities(matrix_of(all_columns, names)[held], weights, bias, mean, scale)
        decided = (all_columns["cosine"][held, 0] >= gate) & all_checks[held] & (probability >= cut)
        figures = precision_recall_hit(decided, pairs.labels[held])
        print(
            f"\nHELD-OUT, measured once, for the best candidate by OOF precision ({best_title.strip()}; penalty "
            f"{penalty:g}, gate {gate:.2f}, cut {cut:.3f}): P={figures[0]:.3f} R={figures[1]:.3f} "
            f"hit={figures[2]:.3f}  (shipped head: P=0.853 R=0.432)"
        )

    if not args.no_timing:
        encode_timings(rows)


if __name__ == "__main__":
    main()
