"""Verifier candidates side by side, offline, on the fixed QQP split (conversations/training/labelled_pairs.py): recall
at precision 0.90 through the decision rule (gate, conflicts, the follow-up guard of a first turn; recall over every
held-out duplicate), N labels picked as bench/dedup_learning.py picks them (nearest the gate among the first 3,500
usable train pairs), for

  - pair-v2 towards the shipped weights (what trains today);
  - pair-v2 + token-alignment features (bench/token_alignment.py, from the bundled MiniLM's token states), plain
    and with IDF from the labelled questions;
  - each of them with the added features' weights held by a penalty of their own (10) instead of the shipped ones';
  - (bench/dedup_cross_encoder.py, on the same split: a cross-encoder and its score as a feature of the head.)

Token states come from transformers on the bundled model's files, cached under KB_VAR_DIR. QQP is in
all-MiniLM-L6-v2's training data and its terms are non-commercial (../shared/data/README.md).

Usage: nice .venv/bin/python bench/dedup_verifier_candidates.py [--labels 1000,3000]
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


def token_states_all(texts: list[str], *, cache: Path):  # noqa: ANN201
    """Per text: (the bundled model's last hidden states of its word pieces, special tokens left out, float16; the
    word pieces), by transformers on the model's own files (the platform's onnx backend gives these states to a
    cosine of 0.9999)."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from retrieval.embeddings import model_path

    if cache.exists():
        stored = np.load(cache, allow_pickle=True)
        return list(stored["states"]), list(stored["tokens"])
    tokenizer = AutoTokenizer.from_pretrained(str(model_path()))
    model = AutoModel.from_pretrained(str(model_path())).eval()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    states, tokens = np.empty(len(texts), dtype=object), np.empty(len(texts), dtype=object)
    with torch.inference_mode():
        for start in range(0, len(order), 128):
            batch = order[start : start + 128]
            encoded = tokenizer([texts[i] for i in batch], padding=True, truncation=True, return_tensors="pt")
            hidden = model(**encoded).last_hidden_state.numpy()
            for row, index in enumerate(batch):
                length = int(encoded["attention_mask"][row].sum())
                states[index] = hidden[row, 1 : length - 1].astype(np.float16)
                tokens[index] = tokenizer.convert_ids_to_tokens(encoded["input_ids"][row, 1 : length - 1].tolist())
            if start % 2560 == 0:
                print(f"\r  token states {start}/{len(texts)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    np.savez(cache, states=states, tokens=tokens)
    return list(states), list(tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gate", type=float, default=0.76)
    parser.add_argument("--labels", default="1000,3000")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
    import django

    django.setup()
    import numpy as np
    import token_alignment
    from django.conf import settings
    from qqp_split import pair_v2_features, qqp_split_load

    from conversations.dedup.duplicate_model import pair_model_default
    from conversations.training.verifier_heads import PENALTIES, fit_towards, prior_extend

    split = qqp_split_load(gate=args.gate)
    pairs, labels, held, train = split.pairs, split.labels, split.held, split.train
    first, second, cosine = split.first, split.second, split.cosine
    r90 = split.recall_at_target

    from conversations.dedup import decisions
    from conversations.training.labelled_pairs import precision_recall_hit

    held_usable = [
        i for i in np.where(held)[0] if pairs.rows[i]["question1"].strip() and pairs.rows[i]["question2"].strip()
    ]
    shipped_hit = np.array(
        [
            decisions.duplicate_decide(
                question=r["question1"],
                question_vector=first[i],
                previous_vector=None,
                candidates=[decisions.StoredQuestion(1, r["question2"], second[i], 0, None)],
                threshold=args.gate,
            ).hit
            for i, r in enumerate(pairs.rows)
        ]
    )
    for name, part in (
        ("dedup_learning's first 300 held-out", np.array(held_usable[:300])),
        ("dedup_learning's first 1,000 held-out", np.array(held_usable[:1000])),
        ("dedup_real_path's first 1,500 held-out", np.where(held)[0][:1500]),
        ("all held-out", np.where(held)[0]),
    ):
        precision, recall, hit = precision_recall_hit(shipped_hit[part], labels[part])
        print(
            f"shipped decision offline on {name} ({len(part)} pairs, {int(labels[part].sum())} duplicates): "
            f"P {precision:.3f} R {recall:.3f} hit {hit:.3f}"
        )

    started = time.perf_counter()
    features = pair_v2_features(split)
    print(f"pair-v2 features {features.shape} in {time.perf_counter() - started:.0f}s", flush=True)

    usable = split.traffic(gate=args.gate)

    started = time.perf_counter()
    texts = [r["question1"] for r in pairs.rows] + [r["question2"] for r in pairs.rows]
    states, tokens = token_states_all(
        texts, cache=Path(settings.VAR_DIR) / "pairs" / f"{pairs.data_sha256[:16]}-tokens.npz"
    )
    count = len(pairs.rows)
    print(f"token states of {len(texts)} texts in {time.perf_counter() - started:.0f}s", flush=True)

    def alignment(idf: dict | None) -> np.ndarray:
        return np.stack(
            [
                token_alignment.alignment_features(
                    first_states=states[i],
                    first_tokens=tokens[i],
                    second_states=states[count + i],
                    second_tokens=tokens[count + i],
                    idf=idf,
                )
                for i in range(count)
            ]
        )

    started = time.perf_counter()
    plain = alignment(None)
    print(f"alignment features in {time.perf_counter() - started:.1f}s", flush=True)
    names = token_alignment.ALIGNMENT_FEATURES
    for column, name in enumerate(names):
        print(f"  {name:<30} alone R@P.90 held out {r90(plain[:, column]):.3f}")
    print(f"  {'cosine':<30} alone R@P.90 held out {r90(cosine):.3f}")

    shipped = pair_model_default()
    v1_count = shipped.weights.shape[0]
    shipped_z = ((features[:, :v1_count] - shipped.mean) / shipped.scale) @ shipped.weights + shipped.bias
    print(f"shipped head R@P.90 held out {r90(shipped_z):.3f}")

    def curve(name: str, extra: np.ndarray | None, picked: np.ndarray, extra_penalty: float | None = None) -> str:
        full = features if extra is None else np.hstack([features, extra])
        prior = prior_extend(shipped, features=full[picked])
        standardised = (full - prior.mean) / prior.scale
        cells = []
        for penalty in PENALTIES:
            weights, bias = fit_towards(
                standardised[picked],
                labels[picked].astype(float),
                prior=prior,
                penalty=penalty,
                added_penalty=extra_penalty,
                known=v1_count,
            )
            cells.append(f"{penalty:g}: {r90(standardised @ weights + bias):.3f}")
        return f"  {name:<40} " + "  ".join(cells)

    for n in (int(x) for x in args.labels.split(",")):
        picked = np.array(usable[:n])
        idf = token_alignment.idf_table([tokens[i] for i in picked] + [tokens[count + i] for i in picked])
        with_idf = alignment(idf)
        print(f"N={n} (penalty: held-out R@P.90)", flush=True)
        print(curve("pair-v2", None, picked))
        print(curve("pair-v2 + alignment", plain, picked))
        print(curve("pair-v2 + alignment (idf of labels)", with_idf, picked), flush=True)
        print(curve("pair-v2, added features penalty 10", None, picked, 10.0))
        print(curve("pair-v2 + alignment, added penalty 10", plain, picked, 10.0))
        print(curve("pair-v2 + alignment idf, added penalty 10", with_idf, picked, 10.0), flush=True)
    all_train = np.where(train)[0]
    print("all train pairs", flush=True)
    print(curve("pair-v2", None, all_train))
    print(curve("pair-v2 + alignment", plain, all_train), flush=True)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
