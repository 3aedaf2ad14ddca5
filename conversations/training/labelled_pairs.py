"""Labelled question pairs (a JSONL file of `pair_id`, `question1`, `question2`, `is_duplicate`, as
../shared/data/qqp/pairs.jsonl is), their fixed train / held-out split and their embeddings: what the duplicate
head is trained on (`manage.py duplicate_head_train`) and evaluated on (bench/dedup_quality.py), so both see the
same split.

The split is a hash of `pair_id` (30% held out), so it does not depend on file order, run or machine. Pairs read
from several files at once (`pairs_load_many`) are split by a hash of the file's name and the pair_id, as ids of two
files may be equal. Embeddings are cached under KB_VAR_DIR, per file, by the data's hash and the embedding model's id,
since both need them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from django.conf import settings

from conversations.dedup import decisions
from conversations.review.review_queue_rules import PickReason
from retrieval.embeddings import embed_texts, model_id

# The public QQP pairs beside this checkout (../shared/data); the evaluation data, not something the platform ships.
# This file is <checkout>/conversations/training/labelled_pairs.py: parents[3] holds the checkout and shared/.
PAIRS = Path(__file__).resolve().parents[3] / "shared" / "data" / "qqp" / "pairs.jsonl"
HELD_OUT_PERCENT = 30
INNER_FOLDS = 5
RANDOM_PICK = str(PickReason.RANDOM)


def _pair_hash(pair_id: str) -> int:
    return int(hashlib.sha256(str(pair_id).encode()).hexdigest()[:16], 16)


def is_held_out(pair_id: str) -> bool:
    return _pair_hash(pair_id) % 100 < HELD_OUT_PERCENT


def split_key(*, file_label: str, pair_id: str) -> str:
    """What a pair of a file read among several (`pairs_load_many`) is split by: the file's label (`file_label_of`)
    before its pair_id, so equal ids of two files are two pairs, each on its own side of the split."""
    return f"{file_label}:{pair_id}"


def file_label_of(path: Path) -> str:
    """A pairs file's name as the split reads it: its folder and file name ("zh/lcqmc.jsonl"), the same on every
    machine and checkout."""
    return f"{path.parent.name}/{path.name}"


def label_is_held_out(label_id: int) -> bool:
    """Whether a tenant's label is held out to judge the verifier trained on the others (30%). Salted, so it does not
    follow the split above: labels drawn from one side of that split are still split 70/30 here."""
    return _pair_hash(f"label:{label_id}") % 100 < HELD_OUT_PERCENT


def label_inner_fold(label_id: int) -> int:
    """Fold (0..INNER_FOLDS-1) of a training label for the verifier's cross-validation; independent of the bit above."""
    return (_pair_hash(f"label:{label_id}") // 100) % INNER_FOLDS


def inner_fold(pair_id: str) -> int:
    """Fold (0..INNER_FOLDS-1) of a train pair for the inner cross-validation; independent of the held-out bit."""
    return (_pair_hash(pair_id) // 100) % INNER_FOLDS


@dataclass(frozen=True)
class LabelledQuestionPair:
    """One labelled pair of a tenant's own traffic (`selectors.duplicate_labels_training`): `question` was asked,
    `stored_question` is the stored one it was compared with, `source` is the `LabelSource` of the label and
    `label_id` its `DuplicateLabel` id. When the review queue picked the label's event, `pick_reason` is the pick's
    `review_queue.PickReason` and `pick_probability` the chance the queue had of picking it (for a random pick, that any
    of its random draws so far did: `review_queue_rules.random_inclusion_probability`); both are empty for a
    label given outside the queue (an audit-log verdict, an import, a file)."""

    question: str
    stored_question: str
    is_duplicate: bool
    source: str
    label_id: int
    pick_reason: str = ""
    pick_probability: float | None = None

    @property
    def random_pick_weight(self) -> float:
        """The inverse of its pick's probability when the queue drew the label at random, else 0: how many decisions
        of the traffic the rules left a random pick stands for. Only random picks say how much of that traffic the
        labels have seen (`MIN_RANDOM_JUDGE_DUPLICATES`)."""
        if self.pick_reason != RANDOM_PICK:
            return 0.0
        return self.traffic_weight

    @property
    def traffic_weight(self) -> float:
        """The label's weight as a sample of the tenant's traffic: the inverse of its pick's inclusion probability
        for any pick of the review queue, 0 for a label given outside it, whose chance of being labelled is not
        known. A rule's pick (near the gate, a disagreement, a flagged one) has chance 1 and counts once: the queue's
        random share is drawn from the decisions the rules did not pick, so the random picks alone stand for the
        traffic without the rules' hardest decisions, and a precision measured on them alone reads high."""
        if not self.pick_reason or self.pick_probability is None or not 0 < self.pick_probability <= 1:
            return 0.0
        return 1.0 / self.pick_probability


@dataclass(frozen=True)
class Pairs:
    rows: list[dict]
    labels: np.ndarray  # 1 = duplicate
    held_out: np.ndarray  # bool
    data_sha256: str
    # The files read, in order, when there are several (`pairs_load_many`): each its own Pairs, the rows of this one
    # theirs one after the other; `source` gives each row's file label.
    parts: tuple[Pairs, ...] = ()
    source: np.ndarray | None = None  # per row, its file's label (`file_label_of`); None for a single file

    @property
    def train(self) -> np.ndarray:
        return ~self.held_out

    @property
    def texts(self) -> list[tuple[str, str]]:
        """Each row's two questions, in order."""
        return [(r["question1"], r["question2"]) for r in self.rows]


def pairs_load(path: Path = PAIRS, *, limit: int = 0, file_label: str = "") -> Pairs:
    """The pairs of one file, split by pair_id alone; with `file_label`, by `split_key(file_label, pair_id)`, as a
    file read among several is."""
    raw = path.read_bytes()
    rows = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
    if limit:
        rows = rows[:limit]
    keys = [split_key(file_label=file_label, pair_id=r["pair_id"]) if file_label else r["pair_id"] for r in rows]
    return Pairs(
        rows=rows,
        labels=np.array([int(r["is_duplicate"]) for r in rows]),
        held_out=np.array([is_held_out(key) for key in keys], dtype=bool),
        data_sha256=hashlib.sha256(raw).hexdigest(),
    )


def pairs_load_many(paths: list[Path]) -> Pairs:
    """The pairs of several files as one set: one file alone is `pairs_load(path)` (its split by pair_id, as the
    bundled model's head was trained); several are each split by `split_key` (pair ids of two files may be equal),
    and `data_sha256` is the digest of their digests, in order."""
    if len(paths) == 1:
        return pairs_load(paths[0])
    parts = tuple(pairs_load(path, file_label=file_label_of(path)) for path in paths)
    return Pairs(
        rows=[row for part in parts for row in part.rows],
        labels=np.concatenate([part.labels for part in parts]),
        held_out=np.concatenate([part.held_out for part in parts]),
        data_sha256=hashlib.sha256("".join(part.data_sha256 for part in parts).encode()).hexdigest(),
        parts=parts,
        source=np.concatenate(
            [np.full(len(part.rows), file_label_of(path)) for part, path in zip(parts, paths, strict=True)]
        ),
    )


def pairs_embed(pairs: Pairs, *, model: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors of question1 and question2 of every pair, by the platform's embedding module with `model` (by
    name; None: the default model), cached per file."""
    if pairs.parts:
        embedded = [pairs_embed(part, model=model) for part in pairs.parts]
        return np.concatenate([e[0] for e in embedded]), np.concatenate([e[1] for e in embedded])
    name = f"{pairs.data_sha256[:16]}-{len(pairs.rows)}-{model_id(model)}.npz"
    cache = Path(settings.VAR_DIR) / "pairs" / name
    if cache.exists():
        stored = np.load(cache)
        return stored["first"], stored["second"]
    first = embed_texts([r["question1"] for r in pairs.rows], model=model)
    second = embed_texts([r["question2"] for r in pairs.rows], model=model)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, first=first, second=second)
    return first, second


def precision_recall_hit(predicted: np.ndarray, labels: np.ndarray) -> tuple[float, float, float]:
    true_positive = int((predicted & (labels == 1)).sum())
    hits = int(predicted.sum())
    precision = true_positive / hits if hits else float("nan")
    recall = true_positive / max(int((labels == 1).sum()), 1)
    return precision, recall, hits / max(len(labels), 1)


def followup_guard_passes(*, rows: list[dict], second: np.ndarray) -> np.ndarray:
    """Per pair: whether the follow-up guard lets question2's stored answer serve question1 asked first in its
    conversation (no context), as `decisions.duplicate_decide` would."""

    return np.array(
        [
            decisions.followup_context_matches(
                question=r["question1"],
                previous_vector=None,
                candidate=decisions.StoredQuestion(0, r["question2"], second[i], 0, None),
                threshold=1.0,
            )
            for i, r in enumerate(rows)
        ]
    )


def labelled_pairs_read(path: Path) -> list[LabelledQuestionPair]:
    """The pairs of a labelled pairs file as a tenant's labels (`question1` asked, `question2` stored), each named by
    its `pair_id`, so a verifier trained on the file holds out the same pairs as the split above."""
    return [
        LabelledQuestionPair(
            question=str(row["question1"]),
            stored_question=str(row["question2"]),
            is_duplicate=bool(int(row["is_duplicate"])),
            source="file",
            label_id=int(row["pair_id"]) if str(row["pair_id"]).isdigit() else _pair_hash(row["pair_id"]) % 2**62,
        )
        for row in pairs_load(path).rows
    ]
