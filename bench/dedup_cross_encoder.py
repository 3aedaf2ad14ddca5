"""A cross-encoder fine-tuned from the bundled MiniLM's weights on N QQP labels, offline, on the fixed split: the
lower layers frozen (their outputs computed once per pair and kept), the top layers and a head trained for several
epochs (`--frozen 0`: every layer trained, the embedding layer's output kept); recall at precision 0.90 through the
decision rule on the held-out pairs, alone and as one more feature of the pair-v2 head (out-of-fold scores for the
head's training labels). Prints training time and peak memory.

Labels as bench/dedup_learning.py picks them (nearest the gate among the first 3,500 usable train pairs), both pair
orders in training, the two orders' mean as the score. The pairs' embeddings and pair-v2 features are made once
and kept under VAR_DIR/pairs (bench/qqp_split.py), as the other offline verifier benchmarks make them.

Usage: nice .venv/bin/python bench/dedup_cross_encoder.py [--labels 3000] [--frozen 4] [--epochs 4] [--folds 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gate", type=float, default=0.76)
    parser.add_argument("--labels", type=int, default=3000)
    parser.add_argument("--frozen", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--folds", type=int, default=2, help="out-of-fold scores for the head feature (0: skip)")
    parser.add_argument("--max-length", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
    import django

    django.setup()
    import numpy as np
    import torch
    from qqp_split import pair_v2_features, qqp_split_load
    from transformers import AutoModel, AutoTokenizer

    from conversations.dedup.duplicate_model import pair_model_default, regression_of
    from conversations.training.verifier_heads import PENALTIES, fit_towards, prior_extend
    from retrieval.embeddings import model_path

    torch.manual_seed(0)
    split = qqp_split_load(gate=args.gate)
    pairs, labels, held, eligible = split.pairs, split.labels, split.held, split.eligible
    features = pair_v2_features(split)
    r90 = split.recall_at_target

    usable = split.traffic(gate=args.gate)
    picked = np.array(usable[: args.labels])
    scored = np.where(held & eligible)[0]
    print(f"{len(picked)} labels ({int(labels[picked].sum())} duplicates); {len(scored)} held-out pairs to score")

    root = str(model_path())
    tokenizer = AutoTokenizer.from_pretrained(root)
    model = AutoModel.from_pretrained(root, attn_implementation="eager")
    layers = model.encoder.layer
    model.eval()

    def additive(mask: torch.Tensor) -> torch.Tensor:
        return (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min

    def lower(indices: np.ndarray, *, reverse: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per pair: the frozen layers' output (float16) and its attention mask."""
        out = []
        with torch.inference_mode():
            for start in range(0, len(indices), 64):
                batch = indices[start : start + 64]
                a = [pairs.rows[i]["question1"] for i in batch]
                b = [pairs.rows[i]["question2"] for i in batch]
                encoded = tokenizer(
                    b if reverse else a,
                    a if reverse else b,
                    padding=True,
                    truncation=True,
                    max_length=args.max_length,
                    return_tensors="pt",
                )
                hidden = model.embeddings(input_ids=encoded["input_ids"], token_type_ids=encoded["token_type_ids"])
                mask = encoded["attention_mask"]
                extended = additive(mask)
                for layer in layers[: args.frozen]:
                    hidden = layer(hidden, attention_mask=extended)
                for row in range(len(batch)):
                    length = int(mask[row].sum())
                    out.append((hidden[row, :length].to(torch.float16).clone(), length))
        return out

    started = time.perf_counter()
    cache = {
        (order, int(i)): item
        for order in (False, True)
        for i, item in zip(
            np.concatenate([picked, scored]), lower(np.concatenate([picked, scored]), reverse=order), strict=True
        )
    }
    print(f"frozen layers' outputs of {len(cache)} pair orders in {time.perf_counter() - started:.0f}s", flush=True)

    def batch_of(keys: list[tuple[bool, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        longest = max(cache[k][1] for k in keys)
        hidden = torch.zeros(len(keys), longest, model.config.hidden_size)
        mask = torch.zeros(len(keys), longest, dtype=torch.long)
        for row, key in enumerate(keys):
            states, length = cache[key]
            hidden[row, :length] = states.float()
            mask[row, :length] = 1
        return hidden, mask

    class Top(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            import copy

            self.layers = torch.nn.ModuleList([copy.deepcopy(layer) for layer in layers[args.frozen :]])
            self.head = torch.nn.Linear(model.config.hidden_size, 1)

        def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            extended = additive(mask)
            for layer in self.layers:
                hidden = layer(hidden, attention_mask=extended)
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
            return self.head(pooled).squeeze(-1)

    def fit(train_ids: np.ndarray) -> Top:
        top = Top()
        top.train()
        optimiser = torch.optim.AdamW(
            [
                {"params": top.layers.parameters(), "lr": args.lr},
                {"params": top.head.parameters(), "lr": 1e-3},
            ],
            weight_decay=0.01,
        )
        keys = [(order, int(i)) for i in train_ids for order in (False, True)]
        target = {int(i): float(labels[i]) for i in train_ids}
        steps = args.epochs * ((len(keys) + 31) // 32)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimiser, lambda step: min(1.0, (step + 1) / (0.1 * steps)) * max(0.0, (steps - step) / steps)
        )
        generator = np.random.default_rng(0)
        for epoch in range(args.epochs):
            began, total = time.perf_counter(), 0.0
            order = generator.permutation(len(keys))
            for start in range(0, len(order), 32):
                chunk = [keys[j] for j in order[start : start + 32]]
                hidden, mask = batch_of(chunk)
                logits = top(hidden, mask)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, torch.tensor([target[k[1]] for k in chunk])
                )
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                schedule.step()
                total += loss.item() * len(chunk)
            print(
                f"  epoch {epoch + 1}: loss {total / len(keys):.4f} in {time.perf_counter() - began:.0f}s",
                flush=True,
            )
        return top.eval()

    def score(top: Top, ids: np.ndarray) -> np.ndarray:
        out = np.zeros(len(ids))
        with torch.inference_mode():
            for order in (False, True):
                for start in range(0, len(ids), 128):
                    chunk = [(order, int(i)) for i in ids[start : start + 128]]
                    out[start : start + len(chunk)] += top(*batch_of(chunk)).numpy() / 2
        return out

    torch.set_num_threads(2)
    started = time.perf_counter()
    top = fit(picked)
    seconds = time.perf_counter() - started
    ce = np.full(len(labels), -1e9)
    ce[scored] = score(top, scored)
    print(
        f"cross-encoder (frozen {args.frozen}, epochs {args.epochs}, lr {args.lr:g}): trained in {seconds:.0f}s; "
        f"held-out R@P.90 {r90(ce):.3f}; peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB",
        flush=True,
    )
    with torch.inference_mode():
        one = [(False, int(scored[0]))]
        hidden, mask = batch_of(one)
        times = []
        for _ in range(20):
            begun = time.perf_counter()
            top(hidden, mask)
            times.append((time.perf_counter() - begun) * 1000)
    print(f"  top layers on one pair: p50 {sorted(times)[10]:.2f} ms (plus the frozen layers' pass)")

    if args.folds:
        oof = np.zeros(len(labels))
        fold_of = np.arange(len(picked)) % args.folds
        for fold in range(args.folds):
            part = fit(picked[fold_of != fold])
            oof[picked[fold_of == fold]] = score(part, picked[fold_of == fold])
        oof[scored] = ce[scored]
        shipped = pair_model_default()
        full = np.hstack([features, oof[:, None]])
        prior = prior_extend(regression_of(shipped), features=full[picked])
        standardised = (full - prior.mean) / prior.scale
        cells = []
        for penalty in PENALTIES:
            weights, bias = fit_towards(
                standardised[picked], labels[picked].astype(float), prior=prior, penalty=penalty
            )
            cells.append(f"{penalty:g}: {r90(standardised @ weights + bias):.3f}")
        print("pair-v2 + cross-encoder score (out-of-fold for the labels), held-out R@P.90: " + "  ".join(cells))


if __name__ == "__main__":
    main()
