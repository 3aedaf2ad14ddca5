"""The bundled bi-encoder fine-tuned on a tenant's labelled pairs, offline, on the fixed QQP split: recall at
precision 0.90 through the decision rule (`QqpSplit.recall_at_target`: the frozen model's cosine gate, conflicts, the
follow-up guard of a first turn; recall over every held-out duplicate) on all 3,641 held-out pairs, for

  - the shipped head, and the tenant head as `verifier_train` trains it (and its replica here, `head_choose`);
  - the fine-tuned encoder's cosine alone, as the head's score (the gate stays the frozen model's cosine);
  - the tenant head with the fine-tuned cosine as one more feature (an added feature, its penalty from
    ADDED_PENALTIES), fitted on out-of-fold fine-tuned cosines of its training labels; the same with in-fold
    cosines (the final encoder's, which saw those labels) is printed beside it and is biased.

Labels: N picked as bench/dedup_learning.py picks them (nearest the gate among the first 3,500 usable train pairs),
or N drawn uniformly at random from those 3,500 (seed 0); numbered in pick order as the database would number them,
split 70/30 (`label_is_held_out`) for the head and in 5 folds (`label_inner_fold`) for the encoder. Fine-tuning
(sentence-transformers' OnlineContrastiveLoss or CoSENTLoss on (question, stored question, label), AdamW, linear
warm-up over 10% of the steps and decay to zero at --epochs, max_seq_length 64): the loss and the number of epochs
are chosen on fold 0 of the labels (20%, the encoder trained on the other 80%) by recall at precision 0.90 through
the rule, ties by average precision; then encoders with that choice give out-of-fold cosines of the labels for the
head (--oof-folds 5: folds 1-4, fold 0's from the selection run; 2, the default, to fit the time budget: two halves
of the labels, each scored by an encoder trained on the other, so weaker than the final one), and a final encoder on
all N labels scores the held-out split. --select halves, cheaper, chooses the epochs (and loss) on every label's
out-of-fold cosine from the two half-encoders instead of on fold 0, and those cosines are the head's feature. The
held-out split chooses nothing: the cosine-alone figure of every loss and epoch on it ("grid on H") is printed for
reference only.

Prints training wall time, peak RSS and the fine-tuned encoder's cost per pair (torch CPU, p50 ms). QQP is in
all-MiniLM-L6-v2's training data and its terms are non-commercial (../shared/data/README.md).

Usage: KB_VAR_DIR=var nice -n 10 .venv/bin/python bench/dedup_biencoder.py [--labels 1000,3000] [--random 1000]
           [--select aside|halves] [--losses online_contrastive,cosent] [--epochs 3]
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

LOSSES = ("online_contrastive", "cosent")
BOOTSTRAP_DRAWS = 1000


@dataclass(frozen=True)
class LabelSet:
    name: str
    index: np.ndarray  # rows of the QQP file, in pick order
    held: np.ndarray  # the head's judge labels (30%), `label_is_held_out`
    folds: np.ndarray  # `label_inner_fold` of every label


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    order = np.argsort(-scores, kind="stable")
    hits = labels[order]
    precision = np.cumsum(hits) / np.arange(1, len(hits) + 1)
    return float((precision * hits).sum() / max(hits.sum(), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gate", type=float, default=0.76)
    parser.add_argument("--labels", default="1000,3000", help="N picked nearest the gate")
    parser.add_argument("--random", default="", help="N drawn uniformly at random from the traffic (seed 0)")
    parser.add_argument("--losses", default=",".join(LOSSES))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--select", choices=("aside", "halves"), default="aside", help="what chooses loss and epochs")
    parser.add_argument("--oof-folds", type=int, choices=(2, 5), default=2, help="encoders for out-of-fold cosines")
    parser.add_argument("--no-grid-on-held", action="store_true", help="skip the reference grid on H")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
    import django

    django.setup()
    import torch
    from qqp_split import TARGET_PRECISION, pair_v2_features, qqp_split_load, shipped_head_log_odds
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss, OnlineContrastiveLoss

    from conversations.dedup.duplicate_model import pair_model_default, pair_model_from_dict, regression_of
    from conversations.training.duplicate_head_training import recall_at_precision
    from conversations.training.labelled_pairs import (
        INNER_FOLDS,
        LabelledQuestionPair,
        label_inner_fold,
        label_is_held_out,
    )
    from conversations.training.verifier_heads import ADDED_PENALTIES, PENALTIES, fit_towards, prior_extend
    from conversations.training.verifier_training import verifier_train
    from retrieval.embeddings import embed_texts, model_path

    torch.set_num_threads(args.threads)
    started_all = time.perf_counter()
    split = qqp_split_load(gate=args.gate)
    rows, labels, held, eligible = split.pairs.rows, split.labels, split.held, split.eligible
    features = pair_v2_features(split)
    shipped = pair_model_default()
    v1 = regression_of(shipped).weights.shape[0]
    shipped_z = shipped_head_log_odds(split)  # the decision's score, a tree head's trees included
    traffic = split.traffic(gate=args.gate)
    held_index = np.where(held)[0]
    r90 = split.recall_at_target
    print(
        f"QQP split: {int(held.sum())} held-out pairs, {int(labels[held].sum())} duplicates, "
        f"{(eligible & held & (labels == 1)).sum() / labels[held].sum():.3f} of them through the rule at gate "
        f"{args.gate} (the ceiling of recall); setup {time.perf_counter() - started_all:.0f}s",
        flush=True,
    )
    print(f"shipped head R@P.90 H {r90(shipped_z):.3f}; frozen cosine alone {r90(split.cosine):.3f}", flush=True)

    def interval(scores: np.ndarray, base: np.ndarray) -> str:
        """R@P.90 of `scores` minus `base`'s on H, and its 95% paired bootstrap interval over the held-out pairs."""
        generator = np.random.default_rng(0)
        differences = []
        for _ in range(BOOTSTRAP_DRAWS):
            draw = generator.choice(held_index, len(held_index), replace=True)
            one = recall_at_precision(
                scores=scores[draw], labels=labels[draw], eligible=eligible[draw], target=TARGET_PRECISION
            )[0]
            other = recall_at_precision(
                scores=base[draw], labels=labels[draw], eligible=eligible[draw], target=TARGET_PRECISION
            )[0]
            differences.append(one - other)
        low, high = np.quantile(differences, [0.025, 0.975])
        return f"{r90(scores) - r90(base):+.3f} [{low:+.3f}, {high:+.3f}]"

    def label_set(name: str, picked: list[int]) -> LabelSet:
        ids = np.arange(1, len(picked) + 1) + 1000  # the database's label ids, in pick order
        return LabelSet(
            name=name,
            index=np.array(picked),
            held=np.array([label_is_held_out(int(i)) for i in ids]),
            folds=np.array([label_inner_fold(int(i)) for i in ids]),
        )

    def head_choose(full: np.ndarray, ls: LabelSet) -> tuple[np.ndarray, str]:
        """verifier_train's choice on any matrix whose first pair-v1 columns are the shipped head's: both penalties
        by 5-fold cross-validation at precision 0.90 on the training labels (ties: the stronger), fit on all of
        them; log-odds of every pair."""
        train_index, folds = ls.index[~ls.held], ls.folds[~ls.held]
        extended = prior_extend(regression_of(shipped), features=full[train_index])
        standardised = (full - extended.mean) / extended.scale
        y = labels[train_index].astype(float)
        choices = []
        for penalty in PENALTIES:
            for added in ADDED_PENALTIES:
                oof = np.zeros(len(train_index))
                for fold in range(INNER_FOLDS):
                    fit_on, score_on = folds != fold, folds == fold
                    w, b = fit_towards(
                        standardised[train_index[fit_on]],
                        y[fit_on],
                        prior=extended,
                        penalty=penalty,
                        added_penalty=added,
                        known=v1,
                    )
                    oof[score_on] = standardised[train_index[score_on]] @ w + b
                recall, _ = recall_at_precision(
                    scores=oof, labels=labels[train_index], eligible=eligible[train_index], target=TARGET_PRECISION
                )
                choices.append((round(recall, 3), penalty, added))
        recall, penalty, added = max(choices)
        w, b = fit_towards(standardised[train_index], y, prior=extended, penalty=penalty, added_penalty=added, known=v1)
        if full.shape[1] > features.shape[1]:
            added_weights = " ".join(f"{x:.2f}" for x in w[features.shape[1] :])
            note = f"penalty {penalty:g}/{added:g}, oof {recall:.3f}, added weight {added_weights}"
        else:
            note = f"penalty {penalty:g}/{added:g}, oof {recall:.3f}"
        return standardised @ w + b, note

    def encoder_train(
        picked: np.ndarray,
        *,
        loss_name: str,
        epochs: int,
        after_epoch: Callable[[int, SentenceTransformer], None] | None = None,
    ) -> tuple[SentenceTransformer, float]:
        """A copy of the bundled bi-encoder fine-tuned on the pairs `picked`; the schedule is --epochs long whatever
        `epochs` stops it at, so a run stopped at epoch e is the selection run's model at epoch e. (model, seconds)."""
        torch.manual_seed(0)
        generator = np.random.default_rng(0)
        model = SentenceTransformer(str(model_path()), device="cpu")
        model.max_seq_length = args.max_seq_length
        loss = OnlineContrastiveLoss(model, margin=0.5) if loss_name == "online_contrastive" else CoSENTLoss(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
        steps = math.ceil(len(picked) / args.batch) * args.epochs
        warmup = max(1, int(0.1 * steps))
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min((step + 1) / warmup, max(0.0, (steps - step) / max(steps - warmup, 1)))
        )
        first = [rows[i]["question1"] for i in picked]
        second = [rows[i]["question2"] for i in picked]
        y = labels[picked].astype(np.float32)
        seconds = 0.0
        for epoch in range(1, epochs + 1):
            started = time.perf_counter()
            model.train()
            order = generator.permutation(len(picked))
            for start in range(0, len(order), args.batch):
                batch = order[start : start + args.batch]
                value = loss(
                    [model.preprocess([first[i] for i in batch]), model.preprocess([second[i] for i in batch])],
                    torch.from_numpy(y[batch]),
                )
                optimizer.zero_grad()
                value.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
            seconds += time.perf_counter() - started
            print(
                f"      {loss_name} epoch {epoch}: {time.perf_counter() - started:.0f}s "
                f"({len(picked)} pairs), RSS peak {peak_rss_mib():.0f} MiB",
                file=sys.stderr,
                flush=True,
            )
            if after_epoch is not None:
                model.eval()
                after_epoch(epoch, model)
        model.eval()
        return model, seconds

    def cosines(model: SentenceTransformer, index: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            a = model.encode(
                [rows[i]["question1"] for i in index],
                batch_size=128,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
            b = model.encode(
                [rows[i]["question2"] for i in index],
                batch_size=128,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return np.clip((a * b).sum(axis=1), -1.0, 1.0)

    def on_held(values: np.ndarray) -> np.ndarray:
        scores = np.full(len(rows), -np.inf)
        scores[held_index] = values
        return scores

    def epoch_record(
        epoch: int,
        model: SentenceTransformer,
        *,
        loss_name: str,
        label_index: np.ndarray,
        part: np.ndarray,
        into: dict[tuple[str, int], np.ndarray],
        cells: list[str],
    ) -> None:
        """After an epoch of a selection run: the cosines of the labels it did not see (`part`, a mask over
        `label_index`), and (reference only) the cosine alone's R@P.90 on H."""
        scores = into.setdefault((loss_name, epoch), np.full(len(part), np.nan))
        scores[part] = cosines(model, label_index[part])
        if not args.no_grid_on_held:
            cells.append(f"{loss_name} e{epoch} {r90(on_held(cosines(model, held_index))):.3f}")

    losses = [x for x in args.losses.split(",") if x]
    runs = [("near-gate", int(n)) for n in args.labels.split(",") if n] + [
        ("random", int(n)) for n in args.random.split(",") if n
    ]
    summary = []
    last_model = None
    for kind, n in runs:
        if kind == "near-gate":
            picked = traffic[:n]
        else:
            picked = [int(i) for i in np.random.default_rng(0).permutation(np.array(traffic))[:n]]
        ls = label_set(f"{kind} N={n}", picked)
        print(
            f"\n{ls.name}: {len(ls.index)} labels, {int(labels[ls.index].sum())} duplicates; head: "
            f"{int((~ls.held).sum())} training, {int(ls.held.sum())} judge labels; encoder fold 0: "
            f"{int((ls.folds == 0).sum())} labels aside",
            flush=True,
        )
        started = time.perf_counter()
        pairs = [
            LabelledQuestionPair(
                question=rows[i]["question1"],
                stored_question=rows[i]["question2"],
                is_duplicate=bool(labels[i]),
                source="support",
                label_id=1001 + k,
            )
            for k, i in enumerate(ls.index)
        ]
        trained = verifier_train(
            pairs=pairs,
            first=split.first[ls.index],
            second=split.second[ls.index],
            prior=shipped,
            active=shipped,
            threshold=args.gate,
            precision_target=TARGET_PRECISION,
            progress=lambda *_: None,
            meta={},
        )
        model = pair_model_from_dict(trained.payload)
        product_z = ((features - model.mean) / model.scale) @ model.weights + model.bias
        replica_z, replica_note = head_choose(features, ls)
        print(
            f"  tenant head (verifier_train): H {r90(product_z):.3f} (penalty {trained.figures['penalty']:g}/"
            f"{trained.figures['added_penalty']:g}; {time.perf_counter() - started:.0f}s); replica H "
            f"{r90(replica_z):.3f} ({replica_note})",
            flush=True,
        )

        # Choosing the loss and the number of epochs. --select aside: on fold 0 (20% of the labels), the encoder
        # trained on the other 80%. --select halves (cheaper): on every label's out-of-fold cosine, the labels in
        # two halves by the parity of their pick order, each half scored by an encoder trained on the other half;
        # those cosines are then the head's out-of-fold feature too.
        if args.select == "aside":
            scored_on = [(ls.folds == 0, ls.folds != 0)]
        else:
            parity = np.arange(len(ls.index)) % 2
            scored_on = [(parity == 0, parity == 1), (parity == 1, parity == 0)]
        chosen_on = np.any([part for part, _ in scored_on], axis=0)
        chosen_index = ls.index[chosen_on]
        epoch_scores: dict[tuple[str, int], np.ndarray] = {}
        grid_cells = []
        selection_seconds = 0.0
        for loss_name in losses:
            for part, trained_on in scored_on:
                record = functools.partial(
                    epoch_record,
                    loss_name=loss_name,
                    label_index=ls.index,
                    part=part,
                    into=epoch_scores,
                    cells=grid_cells if len(scored_on) == 1 else [],
                )
                _, seconds = encoder_train(
                    ls.index[trained_on], loss_name=loss_name, epochs=args.epochs, after_epoch=record
                )
                selection_seconds += seconds
        choices = []
        for (loss_name, epoch), scores in epoch_scores.items():
            scores = scores[chosen_on]
            recall, _ = recall_at_precision(
                scores=scores, labels=labels[chosen_index], eligible=eligible[chosen_index], target=TARGET_PRECISION
            )
            ap = average_precision(scores[eligible[chosen_index]], labels[chosen_index][eligible[chosen_index]])
            choices.append((round(recall, 3), round(ap, 4), -epoch, loss_name, epoch))
            print(
                f"    {args.select} ({len(chosen_index)} labels): {loss_name} epoch {epoch}: R@P.90 {recall:.3f}, "
                f"AP {ap:.3f}"
            )
        frozen_recall, _ = recall_at_precision(
            scores=split.cosine[chosen_index],
            labels=labels[chosen_index],
            eligible=eligible[chosen_index],
            target=TARGET_PRECISION,
        )
        frozen_ap = average_precision(
            split.cosine[chosen_index][eligible[chosen_index]], labels[chosen_index][eligible[chosen_index]]
        )
        print(f"    {args.select}: frozen cosine R@P.90 {frozen_recall:.3f}, AP {frozen_ap:.3f}")
        *_, loss_name, epochs = max(choices)
        print(f"    chosen: {loss_name}, {epochs} epochs; selection training {selection_seconds:.0f}s", flush=True)
        if grid_cells:
            print("    grid on H (cosine alone, reference only, chooses nothing): " + ", ".join(grid_cells), flush=True)

        # Out-of-fold cosines of every label for the head. --select halves: the selection's own. --select aside:
        # with --oof-folds 5, fold 0's from the selection run and folds 1-4 from their own encoders; with 2, two
        # halves by pick-order parity, each scored by an encoder trained on the other (weaker than the final one).
        oof = np.zeros(len(ls.index))
        fold_seconds = 0.0
        if args.select == "halves":
            oof = epoch_scores[(loss_name, epochs)]
            to_train, oof_fold = range(0), None
        elif args.oof_folds == INNER_FOLDS:
            oof_fold = ls.folds
            oof[oof_fold == 0] = epoch_scores[(loss_name, epochs)][oof_fold == 0]
            to_train = range(1, INNER_FOLDS)
        else:
            oof_fold = np.arange(len(ls.index)) % 2
            to_train = range(2)
        for fold in to_train:
            encoder, seconds = encoder_train(ls.index[oof_fold != fold], loss_name=loss_name, epochs=epochs)
            fold_seconds += seconds
            oof[oof_fold == fold] = cosines(encoder, ls.index[oof_fold == fold])
            del encoder
        encoder, final_seconds = encoder_train(ls.index, loss_name=loss_name, epochs=epochs)
        last_model = encoder
        ft_held = cosines(encoder, held_index)
        ft_labels = cosines(encoder, ls.index)
        ft_alone = on_held(ft_held)

        column = np.zeros(len(rows))
        column[held_index] = ft_held
        column[ls.index] = oof
        with_oof_z, oof_note = head_choose(np.hstack([features, column[:, None]]), ls)
        column[ls.index] = ft_labels
        with_in_fold_z, in_fold_note = head_choose(np.hstack([features, column[:, None]]), ls)
        oof_recall, _ = recall_at_precision(
            scores=oof, labels=labels[ls.index], eligible=eligible[ls.index], target=TARGET_PRECISION
        )
        in_fold_recall, _ = recall_at_precision(
            scores=ft_labels, labels=labels[ls.index], eligible=eligible[ls.index], target=TARGET_PRECISION
        )
        print(
            f"    fine-tuned cosine on the labels: out-of-fold R@P.90 {oof_recall:.3f}, in-fold (final encoder) "
            f"{in_fold_recall:.3f}",
            flush=True,
        )
        training = selection_seconds + fold_seconds + final_seconds
        np.savez(
            Path(os.environ.get("KB_VAR_DIR", ROOT / "var")) / f"biencoder-{kind}-{n}.npz",
            index=ls.index,
            oof=oof,
            ft_held=ft_held,
            ft_labels=ft_labels,
        )
        rows_out = [
            ("shipped head", shipped_z, ""),
            ("tenant head (verifier_train)", product_z, ""),
            ("tenant head (replica)", replica_z, replica_note),
            (f"fine-tuned cosine alone ({loss_name}, {epochs} ep)", ft_alone, ""),
            ("tenant head + fine-tuned cosine (out-of-fold)", with_oof_z, oof_note),
            ("tenant head + fine-tuned cosine (in-fold, biased)", with_in_fold_z, in_fold_note),
        ]
        print(
            f"  {ls.name}: R@P.90 on H; minus the shipped head's, and minus the tenant head's (verifier_train), "
            "each with its 95% paired bootstrap interval over H"
        )
        for name, scores, note in rows_out:
            versus_shipped = "" if scores is shipped_z else interval(scores, shipped_z)
            versus_tenant = "" if scores is shipped_z or scores is product_z else interval(scores, product_z)
            print(f"    {name:<52} {r90(scores):.3f}  {versus_shipped:<26} {versus_tenant:<26} {note}", flush=True)
            summary.append((ls.name, name, r90(scores)))
        print(
            f"  training wall time: selection ({args.select}) {selection_seconds:.0f}s ({len(losses)} losses x "
            f"{args.epochs} epochs x {len(scored_on)} encoders), out-of-fold encoders {fold_seconds:.0f}s, final "
            f"{final_seconds:.0f}s ({epochs} epochs on {len(ls.index)} pairs), total {training:.0f}s; peak RSS "
            f"{peak_rss_mib():.0f} MiB",
            flush=True,
        )

    if last_model is not None:
        # Cost per pair at a turn: the question (and, unless its vector is stored, the stored question) through the
        # fine-tuned encoder, one at a time, as a turn would; the platform's own pass of one question beside it.
        sample = held_index[:200]
        for threads in sorted({1, args.threads}):
            torch.set_num_threads(threads)
            timings: dict[str, list[float]] = {"one question": [], "two questions, one batch": []}
            with torch.inference_mode():
                for i in sample[:20]:
                    last_model.encode([rows[i]["question1"], rows[i]["question2"]], show_progress_bar=False)
                for i in sample:
                    started = time.perf_counter()
                    last_model.encode([rows[i]["question1"]], normalize_embeddings=True, show_progress_bar=False)
                    timings["one question"].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    last_model.encode(
                        [rows[i]["question1"], rows[i]["question2"]], normalize_embeddings=True, show_progress_bar=False
                    )
                    timings["two questions, one batch"].append(time.perf_counter() - started)
            cells = ", ".join(
                f"{name} p50 {np.median(t) * 1e3:.1f} ms p90 {np.quantile(t, 0.9) * 1e3:.1f} ms"
                for name, t in timings.items()
            )
            print(f"fine-tuned encoder, torch CPU, {threads} thread(s): {cells}")
        platform = []
        for i in sample:
            started = time.perf_counter()
            embed_texts([rows[i]["question1"]])
            platform.append(time.perf_counter() - started)
        print(
            f"the platform's embed_texts of one question (its backend, for reference): p50 "
            f"{np.median(platform[20:]) * 1e3:.1f} ms"
        )
    print("\nsummary (R@P.90 on all held-out pairs):")
    for name, head, recall in summary:
        print(f"  {name:<16} {head:<52} {recall:.3f}")
    print(f"whole run {time.perf_counter() - started_all:.0f}s; peak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
