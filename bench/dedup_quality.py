"""Quality of the duplicate-question decision on labelled question pairs, with an embedding model's shipped head.

For each threshold it prints precision, recall and hit rate of
  - plain cosine (the model's vectors, as the turn pipeline embeds questions), and
  - the platform's decision, `conversations.dedup.decisions.duplicate_decide` (cosine at or above the threshold AND no
    conflict on numbers or negation AND the model's duplicate head's probability (with its pair reader's score, when
    it has one) at or above its cut AND the
    follow-up guard), run pair by pair exactly as a turn runs it against one stored question,
on the HELD-OUT split (30% of the pairs by a hash of pair_id, conversations/training/labelled_pairs.py; by the file's
name and pair_id when the head was trained on several files), which the head never saw, file by file when there are
several, then the figures at the default threshold (conversations.models.DEFAULT_THRESHOLD) on the held-out split and,
labelled as such, on all pairs (70% of which are the head's training data, so those figures are optimistic).

With KB_PAIR_READER=true the decision is the one with the bundled head's pair reader, and the head alone at its own
cut is printed beside it (the same run's baseline).

`--also FILE` (again for several) adds files the head never saw, none of whose pairs took part in any choice, each
reported whole at the default threshold: a print-only check (the multilingual head's bq, oppo and afqmc_dev).

QQP is in all-MiniLM-L6-v2's own training data (../shared/data/README.md): every figure there, cosine included,
is better than the same decision on questions the model never saw.

Usage: .venv/bin/python bench/dedup_quality.py [--model NAME] [--pairs PATH ...] [--also PATH ...] [--limit N]
  e.g. --model use-multilingual-v3 --pairs ../shared/data/qqp/pairs.jsonl --pairs ../shared/data/zh/afqmc_train.jsonl
       --pairs ../shared/data/zh/lcqmc.jsonl --also ../shared/data/zh/bq.jsonl --also ../shared/data/zh/oppo.jsonl
       --also ../shared/data/zh/afqmc_dev.jsonl
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402

from conversations.dedup import decisions, pair_features, question_pairs  # noqa: E402
from conversations.dedup.duplicate_model import PairModel, pair_model_default  # noqa: E402
from conversations.models import DEFAULT_THRESHOLD  # noqa: E402
from conversations.training.labelled_pairs import (  # noqa: E402
    PAIRS,
    Pairs,
    file_label_of,
    followup_guard_passes,
    pairs_embed,
    pairs_load,
    pairs_load_many,
    precision_recall_hit,
)
from conversations.training.verifier_heads import decision_probabilities, model_probabilities  # noqa: E402
from retrieval.embeddings import model_name, text_readable  # noqa: E402

THRESHOLDS = [0.70, 0.74, 0.76, 0.78, 0.80, 0.84, 0.88, 0.90, 0.92, 0.94, 0.96]
TARGET_PRECISION, TARGET_RECALL = 0.90, 0.40


class Scored:
    """A pairs set's vectors, cosines and the head's probabilities, and the real decision at a threshold."""

    def __init__(self, pairs: Pairs, *, name: str, model: PairModel) -> None:
        self.pairs, self.name, self.model = pairs, name, model
        rows = pairs.rows
        started = time.perf_counter()
        self.first, self.second = pairs_embed(pairs, model=name)
        print(f"embeddings ready in {time.perf_counter() - started:.1f}s")
        self.cosine = (self.first * self.second).sum(axis=1)
        started = time.perf_counter()
        features = pair_features.pair_features_of(
            [(r["question1"], r["question2"]) for r in rows],
            first=self.first,
            second=self.second,
            feature_version=model.feature_version,
        )
        self.head_alone = model_probabilities(model, features)
        # What the decision reads and serves at: the head's probability and cut, or with its pair reader theirs.
        self.probability, self.cut = decision_probabilities(
            model, features, [(r["question1"], r["question2"]) for r in rows]
        )
        print(
            f"duplicate head{' and pair reader' if model.active_reader else ''}: "
            f"{(time.perf_counter() - started) * 1e6 / max(len(rows), 1):.0f} us per pair"
        )
        self.no_conflict = np.array(
            [not question_pairs.questions_conflict(r["question1"], r["question2"]) for r in rows]
        )
        self.followup_ok = followup_guard_passes(rows=rows, second=self.second)
        # A text the model cannot read is decided as a turn decides it (`decisions.unreadable_decide`): an exact repeat
        # once normalised, or nothing; a readable question is never matched with an unreadable stored one.
        self.question_readable = np.array([text_readable(r["question1"], name) for r in rows])
        self.readable = self.question_readable & np.array([text_readable(r["question2"], name) for r in rows])
        self.repeat_served = ~self.question_readable & np.array(
            [
                decisions.question_normalised(r["question1"]) == decisions.question_normalised(r["question2"])
                for r in rows
            ]
        )

    def _rule(self, threshold: float, served: np.ndarray) -> np.ndarray:
        """The decision at `threshold` of pairs both of whose texts the model reads being `served` (the head and the
        checks said yes), and the unreadable repeats."""
        gated = self.cosine >= threshold - 1e-6
        return gated & ((self.readable & self.no_conflict & served & self.followup_ok) | self.repeat_served)

    def vectorised(self, threshold: float) -> np.ndarray:
        """The decision rule on the precomputed figures, as `decide` runs it pair by pair."""
        return self._rule(threshold, self.probability >= self.cut)

    def head_alone_decided(self, threshold: float) -> np.ndarray:
        """The rule with the head alone at its own cut, as it decided before its pair reader (the same run's
        baseline; for a head without a reader, the decision itself)."""
        return self._rule(threshold, self.head_alone >= self.model.cut)

    def decide(self, threshold: float, *, use_head: bool = True) -> np.ndarray:
        """The real decision function, pair by pair (one stored question per pair), for the model's conversations."""
        rows = self.pairs.rows
        out = np.zeros(len(rows), dtype=bool)
        for i in np.where(self.cosine >= threshold - 1e-6)[0]:
            # As a turn reads them: a text the model cannot read is never matched by similarity.
            decision = decisions.duplicate_decide(
                question=rows[i]["question1"],
                question_vector=self.first[i],
                previous_vector=None,
                candidates=[
                    decisions.StoredQuestion(
                        1,
                        rows[i]["question2"],
                        self.second[i],
                        0,
                        None,
                        readable=text_readable(rows[i]["question2"], self.name),
                    )
                ],
                threshold=threshold,
                use_head=use_head,
                embedding_model=self.name,
                question_readable=text_readable(rows[i]["question1"], self.name),
            )
            out[i] = decision.hit
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="the embedding model (default: the default model)")
    parser.add_argument("--pairs", action="append", help="the head's pairs file(s) (default: QQP's)")
    parser.add_argument("--also", action="append", default=[], help="a file the head never saw: print only")
    parser.add_argument("--limit", type=int, default=0, help="first N pairs only (0 = all; one --pairs file only)")
    args = parser.parse_args()

    name = model_name(args.model)
    paths = [Path(p) for p in args.pairs or [str(PAIRS)]]
    pairs = pairs_load(paths[0], limit=args.limit) if len(paths) == 1 else pairs_load_many(paths)
    rows, labels, held_out = pairs.rows, pairs.labels, pairs.held_out
    model = pair_model_default(name)
    print(
        f"pairs: {len(rows)} ({int(labels.sum())} duplicates); held out {int(held_out.sum())} "
        f"({int(labels[held_out].sum())} duplicates); embedding model {name}"
    )
    print(
        f"duplicate head of {model.meta.get('embedding_model')}: {model.meta.get('feature_version')} trained "
        f"{model.meta.get('trained')} on {model.meta.get('train_pairs')} pairs (data sha256 "
        f"{str(model.meta.get('data_sha256'))[:12]}), cut {model.decision_cut:.3f}"
        f"{' (its pair reader' + chr(39) + 's)' if model.active_reader else ''}"
    )
    if model.meta.get("embedding_model") != name:
        print(f"WARNING: {name} has no head of its own: the decision runs without one")
    if model.meta.get("data_sha256") != pairs.data_sha256:
        print("WARNING: the pairs are not the ones the head was trained on: the split may not be held out")

    scored = Scored(pairs, name=name, model=model)
    cosine = scored.cosine
    decided_at = {}
    for threshold in sorted({*THRESHOLDS, DEFAULT_THRESHOLD}):
        # The real decision at the default; the vectorised form of the same rule elsewhere, checked against it there.
        decided_at[threshold] = scored.vectorised(threshold)
    real = scored.decide(DEFAULT_THRESHOLD)
    if model.meta.get("embedding_model") == name:
        assert (real == decided_at[DEFAULT_THRESHOLD]).all()
    decided_at[DEFAULT_THRESHOLD] = real

    def table(subset: np.ndarray, title: str) -> None:
        print()
        print(title)
        print(f"{'threshold':>9} | {'cosine P':>8} {'R':>6} {'hit':>6} | {'decision P':>10} {'R':>6} {'hit':>6}")
        for threshold in THRESHOLDS:
            plain = precision_recall_hit(cosine[subset] >= threshold, labels[subset])
            decided = precision_recall_hit(decided_at[threshold][subset], labels[subset])
            mark = "  <- default" if abs(threshold - DEFAULT_THRESHOLD) < 1e-9 else ""
            print(
                f"{threshold:>9.2f} | {plain[0]:>8.3f} {plain[1]:>6.3f} {plain[2]:>6.3f} | "
                f"{decided[0]:>10.3f} {decided[1]:>6.3f} {decided[2]:>6.3f}{mark}"
            )

    everything = np.ones(len(rows), dtype=bool)
    table(held_out, f"HELD-OUT pairs ({int(held_out.sum())}; never used to train or tune the head)")
    table(everything, f"all pairs ({len(rows)}; 70% are the head's training data: optimistic)")

    print()
    headless = scored.decide(DEFAULT_THRESHOLD, use_head=False)
    subsets = [("held-out", held_out), ("all pairs (optimistic)", everything)]
    if pairs.source is not None:
        subsets += [
            (f"held-out {file_label_of(path)}", held_out & (pairs.source == file_label_of(path))) for path in paths
        ]
    results = {}
    for label, subset in subsets:
        plain = precision_recall_hit(cosine[subset] >= DEFAULT_THRESHOLD, labels[subset])
        decided = precision_recall_hit(decided_at[DEFAULT_THRESHOLD][subset], labels[subset])
        without = precision_recall_hit(headless[subset], labels[subset])
        alone = precision_recall_hit(scored.head_alone_decided(DEFAULT_THRESHOLD)[subset], labels[subset])
        results[label] = decided
        print(
            f"default threshold {DEFAULT_THRESHOLD:.2f}, {label} ({int(subset.sum())}): cosine P={plain[0]:.3f} "
            f"R={plain[1]:.3f}; decision P={decided[0]:.3f} R={decided[1]:.3f} hit={decided[2]:.3f}; without the "
            f"head (gate {decisions.HEADLESS_THRESHOLD_FLOOR:.2f}) P={without[0]:.3f} R={without[1]:.3f}"
            + (f"; the head alone, no pair reader: P={alone[0]:.3f} R={alone[1]:.3f}" if model.active_reader else "")
        )
    held = results["held-out"]
    target = held[0] >= TARGET_PRECISION and held[1] >= TARGET_RECALL
    print(
        f"target (P >= {TARGET_PRECISION:.2f} with R >= {TARGET_RECALL:.2f}) at the default, held-out: "
        f"{'met' if target else 'NOT met'}"
    )

    for also in args.also:
        print()
        print(f"PRINT ONLY, a file the head never saw and no choice read: {also}")
        other = Scored(pairs_load(Path(also)), name=name, model=model)
        decided = other.decide(DEFAULT_THRESHOLD)
        without = other.decide(DEFAULT_THRESHOLD, use_head=False)
        own = other.pairs.labels
        plain = precision_recall_hit(other.cosine >= DEFAULT_THRESHOLD, own)
        figures, headless_figures = precision_recall_hit(decided, own), precision_recall_hit(without, own)
        alone = precision_recall_hit(other.head_alone_decided(DEFAULT_THRESHOLD), own)
        print(
            f"  {len(own)} pairs ({int(own.sum())} duplicates), default threshold {DEFAULT_THRESHOLD:.2f}: cosine "
            f"P={plain[0]:.3f} R={plain[1]:.3f}; decision P={figures[0]:.3f} R={figures[1]:.3f} hit={figures[2]:.3f}; "
            f"without the head P={headless_figures[0]:.3f} R={headless_figures[1]:.3f}"
            + (f"; the head alone, no pair reader: P={alone[0]:.3f} R={alone[1]:.3f}" if model.active_reader else "")
        )
        _print_batches(other.pairs.rows, decided)


def _print_batches(rows: list[dict], decided: np.ndarray) -> None:
    """Served counts per batch of a file written here, its pair ids' common beginning ("hc1", "lk-en": the id less its
    last two parts, "-rewording-01"), when the file has more than one and its ids make batches (a shared set's ids,
    "paws_qqp:bcb4bec93d40319d", make one batch of each pair: nothing is printed)."""
    batches: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        batches.setdefault(str(row["pair_id"]).rsplit("-", 2)[0], []).append(i)
    if len(batches) < 2 or len(batches) == len(rows):
        return
    for batch, indexes in batches.items():
        duplicates = [i for i in indexes if rows[i]["is_duplicate"]]
        others = [i for i in indexes if not rows[i]["is_duplicate"]]
        print(
            f"    {batch}: rewordings served {int(decided[duplicates].sum())} of {len(duplicates)}, look-alikes served "
            f"{int(decided[others].sum())} of {len(others)}"
        )


if __name__ == "__main__":
    main()
