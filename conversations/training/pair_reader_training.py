"""Training the pair reader of the bundled model's shipped head: a cross-encoder made from all-MiniLM-L6-v2's own
weights with low-rank adapters (`retrieval.cross_encoder`), whose score joins the head's in the decision
(`conversations.dedup.pair_reader`). QQP's labelled pairs, the head's own data and split; every choice on the train
split, the held-out 30% judged at the end.

1. The head's regression's out-of-fold probabilities on the train split (its own penalty, its 5 inner folds), as
   the head's cut was chosen on them (a tree head's trees read them too; the reader is combined with the regression).
2. Two readers, each fitted on half of the train split (halves by a salted hash of pair_id), each scoring the other
   half: every train pair has a reader score from a reader that never saw it.
3. The combination: a two-weight logistic fit over (the head's log-odds, the reader's score), standardised, on the
   train pairs the decision rule lets through (the head's gate, no number or negation conflict, the follow-up guard);
   then its cut by the head's own rule (`duplicate_head_training.RECALL_FLOOR`: the best out-of-fold precision at
   that recall through the rule).
4. The reader shipped: fitted the same way on the whole train split, its adapters written in fp16 beside the head
   and scored from that file as the platform scores it; the held-out figures at the chosen cut with the shipped
   head's probabilities, beside the head alone, go into the head file's `reader` block with the two weights, their
   scaling and the cut.

A reader fitted on the whole split reads its pairs a little more surely than the halves did; the cut chosen on the
halves' scores is therefore conservative, and the held-out figures say what it does.

Run by `manage.py pair_reader_train [--rank 16] [--epochs 2] [--limit N]` (about 45 minutes on two cores).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from conversations.dedup import question_pairs
from conversations.dedup.duplicate_model import MODEL_PATH, pair_model_load, pair_probability, regression_probability
from conversations.dedup.pair_reader import READER_FILE, combined_probability, pair_reader_from_dict
from conversations.training.duplicate_head_training import (
    RECALL_FLOOR,
    _inner_folds,
    _pair_features,
    _peak_memory_mib,
    best_precision_at_recall,
    figures,
    logistic_fit,
    out_of_fold,
    significant,
    standardise,
)
from conversations.training.labelled_pairs import (
    PAIRS,
    followup_guard_passes,
    pairs_embed,
    pairs_load_many,
    precision_recall_hit,
)
from retrieval import cross_encoder
from retrieval.embeddings import BUNDLED_MODEL_NAME, model_path

BATCH = 32
COMBINATION_PENALTY = 1.0


def reader_half(pair_id: str) -> int:
    """Which half of the train split a pair's first reader is fitted on (0 or 1): salted, so halves cut across the
    head's inner folds."""
    return int(hashlib.sha256(f"reader-half:{pair_id}".encode()).hexdigest()[:16], 16) % 2


def reader_fit(
    *,
    rows: Sequence[dict],
    root: Path,
    out: Path,
    rank: int,
    epochs: int,
    lr: float,
    seed: int,
    say: Callable[[str], None],
) -> int:
    """Fit a reader on `rows` (both orders of each pair) and write its adapters to `out` in fp16; returns how many
    numbers were trained. The model's own weights stay frozen; each adapted layer's update starts at zero, so training
    starts from the bi-encoder's weights."""
    import torch

    torch.manual_seed(seed)
    shuffle = random.Random(seed)
    model = cross_encoder.sequence_model(root)
    factors = adapters_add(model, rank=rank)
    trainable = [p for p in model.parameters() if p.requires_grad]
    tokenizer = cross_encoder.pair_tokenizer(root)
    examples = [
        (cross_encoder.pair_read(r["question1"]), cross_encoder.pair_read(r["question2"]), float(r["is_duplicate"]))
        for r in rows
    ]
    examples += [(b, a, y) for a, b, y in examples]
    optimiser = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.01)
    steps = epochs * -(-len(examples) // BATCH)
    warm = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: s / warm if s < warm else max(0.0, (steps - s) / max(1, steps - warm))
    )
    loss_of = torch.nn.BCEWithLogitsLoss()
    started = time.perf_counter()
    model.train()
    for epoch in range(epochs):
        shuffle.shuffle(examples)
        total = 0.0
        for start in range(0, len(examples), BATCH):
            batch = examples[start : start + BATCH]
            columns = cross_encoder.pair_columns(tokenizer, [(a, b) for a, b, _ in batch])
            logits = model(**{k: torch.from_numpy(v) for k, v in columns.items()}).logits.squeeze(-1)
            loss = loss_of(logits, torch.tensor([y for _, _, y in batch]))
            loss.backward()
            optimiser.step()
            schedule.step()
            optimiser.zero_grad()
            total += loss.item() * len(batch)
        say(
            f"    epoch {epoch + 1}/{epochs}: mean loss {total / len(examples):.3f}, "
            f"{time.perf_counter() - started:.0f} s"
        )
    adapters_write(model=model, factors=factors, out=out)
    return sum(p.numel() for p in trainable)


def adapters_write(*, model: object, factors: dict[str, tuple[object, object]], out: Path) -> None:
    """Write the adapters of `model` (`factors`, as `adapters_add` gave them) and its trained tensors to `out` in fp16,
    in the layout `cross_encoder.merged_model` reads."""
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    arrays = {
        f"{name}.{part}": tensor.detach().numpy()
        for name, (down, up) in factors.items()
        for part, tensor in (("down", down), ("up", up))
    }
    arrays.update({key: state[key] for key in cross_encoder.TRAINED_TENSORS})
    with open(out, "wb") as handle:  # np.savez would add ".npz" to a name without it
        np.savez(handle, **{k: v.astype(np.float16) for k, v in arrays.items()})


def adapters_add(model: object, *, rank: int) -> dict[str, tuple[object, object]]:
    """Freeze `model`, give each of `cross_encoder.adapted_layer_names` a trained update ADAPTER_SCALE * up @ down
    (`up` zero at first) and train the pooler and classifier; returns each layer's (down, up)."""
    import torch

    class Adapted(torch.nn.Module):
        def __init__(self, base: torch.nn.Linear) -> None:
            super().__init__()
            self.base = base
            self.down = torch.nn.Parameter(torch.randn(rank, base.in_features) * (0.1 / rank**0.5))
            self.up = torch.nn.Parameter(torch.zeros(base.out_features, rank))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.base(x) + (x @ self.down.T @ self.up.T) * cross_encoder.ADAPTER_SCALE

    names = cross_encoder.adapted_layer_names(model)
    for parameter in model.parameters():
        parameter.requires_grad = False
    factors = {}
    for name in names:
        owner_name, _, attribute = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        adapted = Adapted(getattr(owner, attribute))
        setattr(owner, attribute, adapted)
        factors[name] = (adapted.down, adapted.up)
    for key in cross_encoder.TRAINED_TENSORS:
        model.get_parameter(key).requires_grad = True
    return factors


def reader_scores(*, root: Path, adapters: Path, rows: Sequence[dict]) -> np.ndarray:
    """The reader at `adapters` scoring `rows` as the platform scores a pair (merged, from the fp16 file, both
    orders)."""
    scorer = cross_encoder.PairScorer(
        run=cross_encoder.torch_run(cross_encoder.merged_model(root=root, adapters=adapters)),
        tokenizer=cross_encoder.pair_tokenizer(root),
    )
    return scorer.scores([(r["question1"], r["question2"]) for r in rows], batch_size=64)


def reader_train(
    *,
    say: Callable[[str], None],
    head_file: Path = MODEL_PATH,
    pairs_path: Path = PAIRS,
    rank: int = 16,
    epochs: int = 2,
    lr: float = 3e-4,
    limit: int = 0,
) -> dict:
    """Fit the reader of the head at `head_file` (the bundled model's) by steps 1-4 above, write its adapters beside
    the head and its block into the head's file; returns the block. `limit` fits on the first N train pairs of
    each half only (a smoke run: its figures say nothing)."""
    began = time.perf_counter()
    head_payload = json.loads(head_file.read_text(encoding="utf-8"))
    head = pair_model_load(head_file)
    if head.meta.get("embedding_model") != BUNDLED_MODEL_NAME:
        raise ValueError(f"{head_file} is not the bundled model's head: a pair reader reads that model's tokens")
    pairs = pairs_load_many([pairs_path])
    labels, train, held_out = pairs.labels, pairs.train, pairs.held_out
    first, second = pairs_embed(pairs, model=BUNDLED_MODEL_NAME)
    # The head's own features (a tree head's pair-v3); its regression reads their pair-v1 prefix.
    every_feature = _pair_features(pairs, first, second, feature_version=head.feature_version)
    features = every_feature[:, : head.weights.shape[0]]
    cosine = (first * second).sum(axis=1)
    agree = np.array([not question_pairs.questions_conflict(r["question1"], r["question2"]) for r in pairs.rows])
    eligible = (cosine >= head.meta["threshold"]) & agree & followup_guard_passes(rows=pairs.rows, second=second)
    say(f"pairs: train {int(train.sum())}, held out {int(held_out.sum())} (never used for a choice)")

    # 1. the regression's out-of-fold probabilities on the train split; the shipped regression's on the held-out pairs
    # (the combination reads the head's regression, a tree head's too: `decisions.decision_probability`); beside
    # them, the head as it decides alone, at its own cut, for the figures
    head_probability = np.zeros(len(labels))
    head_probability[train] = out_of_fold(
        features[train], labels[train], _inner_folds(pairs)[train], penalty=float(head.meta["penalty"])
    )
    head_probability[held_out] = [regression_probability(model=head, features=row) for row in features[held_out]]
    regression_cut = float(head.meta.get("regression", {}).get("cut", head.cut))
    head_alone = np.array([pair_probability(model=head, features=row) for row in every_feature[held_out]])

    # 2. two readers on halves, each scoring the other half
    root = model_path(BUNDLED_MODEL_NAME)
    halves = np.array([reader_half(r["pair_id"]) for r in pairs.rows])
    reader = np.zeros(len(labels))
    with tempfile.TemporaryDirectory() as scratch:
        for half in (0, 1):
            fit_rows = [pairs.rows[i] for i in np.flatnonzero(train & (halves == half))]
            scored = train & (halves != half)
            fit_rows = fit_rows[:limit] if limit else fit_rows
            say(f"reader on half {half} ({len(fit_rows)} pairs), scoring the other ({int(scored.sum())})")
            path = Path(scratch) / f"half{half}.npz"
            reader_fit(rows=fit_rows, root=root, out=path, rank=rank, epochs=epochs, lr=lr, seed=half, say=say)
            reader[scored] = reader_scores(
                root=root, adapters=path, rows=[pairs.rows[i] for i in np.flatnonzero(scored)]
            )

    # 3. the combination and its cut, on the train split's out-of-fold scores
    inputs = np.column_stack([_log_odds(head_probability), reader])
    chosen_on = train & eligible
    mean, scale = standardise(inputs[chosen_on])
    weights, bias = logistic_fit((inputs[chosen_on] - mean) / scale, labels[chosen_on], penalty=COMBINATION_PENALTY)
    block = {
        "mean": [significant(v) for v in mean],
        "scale": [significant(v) for v in scale],
        "weights": [significant(v) for v in weights],
        "bias": significant(bias),
        "cut": 0.0,
    }
    combined = _combined(block, head_probability, reader)
    precision, cut = best_precision_at_recall(
        np.where(eligible[train], combined[train], -1.0), labels[train], RECALL_FLOOR
    )
    if not np.isfinite(cut) or cut < 0:
        raise ValueError(f"no cut reaches recall {RECALL_FLOOR} on the train split's out-of-fold scores")
    block["cut"] = round(float(cut), 6)
    oof = precision_recall_hit(eligible[train] & (combined[train] >= cut), labels[train])
    head_oof = precision_recall_hit(eligible[train] & (head_probability[train] >= regression_cut), labels[train])
    say(
        f"combination: weights {block['weights']} (head log-odds, reader), cut {cut:.3f}; out of fold P {oof[0]:.3f} "
        f"R {oof[1]:.3f} (the regression alone at its cut: P {head_oof[0]:.3f} R {head_oof[1]:.3f})"
    )

    # 4. the shipped reader, on the whole train split, scored from its own file
    out = head_file.with_name(READER_FILE)
    fit_rows = [pairs.rows[i] for i in np.flatnonzero(train)]
    fit_rows = fit_rows[: 2 * limit] if limit else fit_rows
    say(f"the shipped reader, on the whole train split ({len(fit_rows)} pairs)")
    trained = reader_fit(rows=fit_rows, root=root, out=out, rank=rank, epochs=epochs, lr=lr, seed=2, say=say)
    held_rows = [pairs.rows[i] for i in np.flatnonzero(held_out)]
    reader_held = reader_scores(root=root, adapters=out, rows=held_rows)
    combined_held = _combined(block, head_probability[held_out], reader_held)
    held = precision_recall_hit(eligible[held_out] & (combined_held >= cut), labels[held_out])
    head_held = precision_recall_hit(eligible[held_out] & (head_alone >= head.cut), labels[held_out])
    say(
        f"held out: P {held[0]:.3f} R {held[1]:.3f} hit rate {held[2]:.3f} (the head alone: P {head_held[0]:.3f} "
        f"R {head_held[1]:.3f})"
    )
    block.update(
        {
            "adapters": out.name,
            "adapters_sha256": cross_encoder.adapters_digest(out),
            "trained": datetime.datetime.now(tz=datetime.UTC).date().isoformat(),
            "data": head_payload.get("data"),
            "data_sha256": head_payload.get("data_sha256"),
            "fitted_on": (
                "the head's train split, both orders of each pair (the halves for the cut: salted hash of pair_id)"
            ),
            "rank": rank,
            "epochs": epochs,
            "learning_rate": lr,
            "trained_numbers": trained,
            "max_length": cross_encoder.MAX_LENGTH,
            "recall_floor": RECALL_FLOOR,
            "train_out_of_fold": figures(oof),
            "held_out": figures(held),
            "held_out_head_alone": figures(head_held),
            **({"smoke_run_limit": limit} if limit else {}),
        }
    )
    pair_reader_from_dict(block)  # what is written must load
    head_payload["reader"] = block
    head_file.write_text(json.dumps(head_payload, indent=1) + "\n", encoding="utf-8")
    say(
        f"wrote {out.name} ({out.stat().st_size / 1024:.0f} KiB) and the reader block of {head_file.name}; "
        f"{time.perf_counter() - began:.0f} s, peak memory {_peak_memory_mib():.0f} MiB"
    )
    return block


def _log_odds(probability: np.ndarray) -> np.ndarray:
    clipped = np.clip(probability, 1e-7, 1 - 1e-7)
    return np.log(clipped / (1 - clipped))


def _combined(block: dict, head_probability: np.ndarray, reader: np.ndarray) -> np.ndarray:
    model = pair_reader_from_dict({**block, "adapters": "-", "adapters_sha256": "-"})
    return np.array(
        [
            combined_probability(reader=model, head_probability=h, reader_score=r)
            for h, r in zip(head_probability, reader, strict=True)
        ]
    )
