"""The QQP split as the offline verifier benchmarks read it (bench/dedup_learning_diagnosis.py,
bench/dedup_verifier_candidates.py, bench/dedup_cross_encoder.py): the labelled pairs, their vectors, which pairs
every check of the decision but the head lets through, the traffic a benchmark tenant would review, and recall at
the precision target. Django must be set up before `qqp_split_load`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

TARGET_PRECISION = 0.90
# Train-split pairs a benchmark tenant's traffic is drawn from (bench/dedup_learning.py's default).
TRAFFIC = 3500


@dataclass(frozen=True)
class QqpSplit:
    pairs: object  # conversations.training.labelled_pairs.pairs_load's
    labels: np.ndarray
    held: np.ndarray
    train: np.ndarray
    first: np.ndarray
    second: np.ndarray
    cosine: np.ndarray
    checks: np.ndarray  # numbers, negation and the follow-up guard let the pair through
    eligible: np.ndarray  # the checks and the gate

    def recall_at_target(self, scores: np.ndarray, part: np.ndarray | None = None) -> float:
        """Recall at TARGET_PRECISION of `scores` over the pairs of `part` (the held-out ones by default)."""
        from conversations.training.duplicate_head_training import recall_at_precision

        part = self.held if part is None else part
        recall, _ = recall_at_precision(
            scores=scores[part], labels=self.labels[part], eligible=self.eligible[part], target=TARGET_PRECISION
        )
        return recall

    def traffic(self, *, gate: float) -> list[int]:
        """The first TRAFFIC train-split pairs with both questions, nearest the gate first (a review queue's
        order)."""
        rows = self.pairs.rows
        usable = [i for i in np.where(self.train)[0] if rows[i]["question1"].strip() and rows[i]["question2"].strip()]
        usable = usable[:TRAFFIC]
        usable.sort(key=lambda i: (abs(self.cosine[i] - gate), i))
        return usable


def qqp_split_load(*, gate: float) -> QqpSplit:
    from conversations.dedup import question_pairs
    from conversations.training.labelled_pairs import followup_guard_passes, pairs_embed, pairs_load

    pairs = pairs_load()
    first, second = pairs_embed(pairs)
    cosine = np.clip((first * second).sum(axis=1), -1.0, 1.0)
    checks = ~np.array([bool(question_pairs.questions_conflict(r["question1"], r["question2"])) for r in pairs.rows])
    checks &= followup_guard_passes(rows=pairs.rows, second=second)
    return QqpSplit(
        pairs=pairs,
        labels=pairs.labels,
        held=pairs.held_out,
        train=pairs.train,
        first=first,
        second=second,
        cosine=cosine,
        checks=checks,
        eligible=(cosine >= gate) & checks,
    )


def shipped_head_log_odds(split: QqpSplit) -> np.ndarray:
    """The shipped head's log-odds of every pair, as the decision scores it (`duplicate_model.pair_log_odds` on
    features of the head's own feature version): for a tree head, its trees, not the regression they read."""
    from conversations.dedup import pair_features
    from conversations.dedup.duplicate_model import pair_log_odds, pair_model_default

    shipped = pair_model_default()
    features = pair_features.pair_features_of(
        split.pairs.texts, first=split.first, second=split.second, feature_version=shipped.feature_version
    )
    return np.array([pair_log_odds(model=shipped, features=row) for row in features])


def pair_v2_features(split: QqpSplit) -> np.ndarray:
    """The tenant verifier's features of every pair, made once per data file under VAR_DIR/pairs."""
    from django.conf import settings

    from conversations.dedup import pair_features
    from conversations.dedup.pair_features import TENANT_FEATURE_VERSION

    cache = Path(settings.VAR_DIR) / "pairs" / f"{split.pairs.data_sha256[:16]}-pair-v2.npy"
    if cache.exists():
        return np.load(cache)
    features = pair_features.pair_features_of(
        split.pairs.texts, first=split.first, second=split.second, feature_version=TENANT_FEATURE_VERSION
    )
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, features)
    return features
