"""What each offered embedding model costs a deployment, in one process as a web process holds them (issue 35, "Must
show"): query embedding latency, ingestion throughput and resident memory, every model in the same run.

    .venv/bin/python bench/embedding_cost.py [--queries N] [--chunks N]

- memory: the process's resident set (VmRSS, /proc/self/status) with Django set up and every API module imported (what
  a web process holds before its first question), then after loading the bundled model (all-MiniLM-L6-v2 on the
  deployment's EMBEDDING_BACKEND) and embedding a first text, then after loading the multilingual model too: the last
  is the memory of a web process that serves knowledge bases of both.
- query embedding: `retrieval.embeddings.embed_query(text, model)`, one question at a time after a warm-up, p50 and
  p95 per model and language; --queries Chinese questions (question1 of zh/bq, lcqmc, afqmc_dev, oppo) and as many
  English ones (QQP), a seeded sample, the models taking turns question by question (the first model swapped every
  question) so load falls on both alike. Target: the multilingual model's p50 within 2x the bundled model's.
- ingestion: `embed_texts` in batches of KB_INGEST_EMBED_BATCH (as an indexing run embeds a document batch's chunks)
  on chunk-sized texts: SciFact abstracts (English) and Chinese questions run together into documents of 30, each cut
  by `chunking.text_chunk` as a knowledge base's default settings cut them (the bundled model's tokens, so both
  models get the very same texts); --chunks of each, the models taking turns batch by batch. Chunks per second and
  characters per second.

Timings are indicative on a shared machine: the load average is printed beside each. The onnx file of the bundled
model is made first, in a process of its own, when it is missing (its export imports PyTorch, which would otherwise
count in this process's memory).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from common import DATA, ROOT, load_average, rss_mb

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
os.environ.setdefault("KB_VAR_DIR", str(ROOT / "var" / "bench"))  # the benchmarks' onnx file and caches
os.environ.setdefault("LOG_LEVEL", "WARNING")

SEED = 35
CHINESE_FILES = ("bq.jsonl", "lcqmc.jsonl", "afqmc_dev.jsonl", "oppo.jsonl")
QUESTIONS_PER_DOCUMENT = 30
TARGET_RATIO = 2.0


def first_questions(path: Path) -> list[str]:
    with path.open(encoding="utf-8") as handle:
        return [str(json.loads(line)["question1"]) for line in handle if line.strip()]


def chunk_texts(documents: list[str], *, limit: int) -> list[str]:
    """The first `limit` chunks of `documents` as a knowledge base of the default settings cuts them (the primary
    model's tokens)."""
    from retrieval.chunking import text_chunk
    from retrieval.embeddings import primary_model
    from retrieval.models import KnowledgeBase

    defaults = KnowledgeBase()
    chunks: list[str] = []
    for document in documents:
        drafts = text_chunk(
            text=document,
            max_tokens=defaults.chunk_max_tokens,
            overlap_tokens=defaults.chunk_overlap_tokens,
            model=primary_model(),
        )
        chunks += [draft.text for draft in drafts]
        if len(chunks) >= limit:
            break
    return chunks[:limit]


def percentile(values: list[float], share: float) -> float:
    return float(np.percentile(np.asarray(values), share * 100))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300, help="questions timed one at a time, per language")
    parser.add_argument("--chunks", type=int, default=1536, help="chunks embedded per language")
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings
    from django.urls import get_resolver

    from retrieval import embeddings

    if settings.EMBEDDING_BACKEND == "onnx" and not embeddings.onnx_file().is_file():
        print("making the onnx file of the bundled model (once, in a process of its own)", file=sys.stderr)
        subprocess.run([sys.executable, "manage.py", "embedding_model_export"], check=True, cwd=ROOT)
    get_resolver().url_patterns  # noqa: B018 - imports every API module, as a web process has before its first request
    models = list(embeddings.offered_models())
    primary = embeddings.primary_model()
    multilingual = embeddings.USE_MODEL_NAME
    if multilingual not in models:
        raise SystemExit(f"{multilingual} is not offered (EMBEDDING_MODELS: {', '.join(models)})")
    models = [primary, multilingual]

    memory = [("web process, no model loaded", rss_mb(), None)]
    for model in models:
        started = time.perf_counter()
        embeddings.embed_texts(["warm up", "热身一下"], model=model)
        memory.append((f"+ {model} loaded", rss_mb(), time.perf_counter() - started))
    assert embeddings.models_loaded() == models, embeddings.models_loaded()

    rng = np.random.default_rng(SEED)
    chinese_pool = [q for name in CHINESE_FILES for q in first_questions(DATA / "zh" / name)]
    english_pool = first_questions(DATA / "qqp" / "pairs.jsonl")
    questions = {
        "zh": [chinese_pool[i] for i in rng.choice(len(chinese_pool), args.queries, replace=False)],
        "en": [english_pool[i] for i in rng.choice(len(english_pool), args.queries, replace=False)],
    }
    chinese_documents = [
        "".join(chinese_pool[i : i + QUESTIONS_PER_DOCUMENT])
        for i in rng.permutation(range(0, len(chinese_pool) - QUESTIONS_PER_DOCUMENT, QUESTIONS_PER_DOCUMENT))
    ]
    with (DATA / "scifact" / "corpus.jsonl").open(encoding="utf-8") as handle:
        english_documents = [
            f"{row.get('title', '')}\n\n{row['text']}".strip()
            for row in (json.loads(line) for line in handle if line.strip())
        ]
    chunks = {
        "zh": chunk_texts(chinese_documents, limit=args.chunks),
        "en": chunk_texts(english_documents, limit=args.chunks),
    }

    # Warm-up of the one-at-a-time path, then the timing, the models taking turns question by question.
    for model in models:
        for text in questions["zh"][:20] + questions["en"][:20]:
            embeddings.embed_query(text, model)
    load_before = load_average()
    latencies: dict[tuple[str, str], list[float]] = {(m, lang): [] for m in models for lang in questions}
    for language, texts in questions.items():
        for number, text in enumerate(texts):
            for model in models if number % 2 == 0 else models[::-1]:
                started = time.perf_counter()
                embeddings.embed_query(text, model)
                latencies[(model, language)].append((time.perf_counter() - started) * 1000)
    load_after_queries = load_average()

    batch = settings.INGEST_EMBED_BATCH
    seconds: dict[tuple[str, str], float] = {(m, lang): 0.0 for m in models for lang in chunks}
    for language, texts in chunks.items():
        for number, start in enumerate(range(0, len(texts), batch)):
            for model in models if number % 2 == 0 else models[::-1]:
                started = time.perf_counter()
                embeddings.embed_texts(texts[start : start + batch], model=model)
                seconds[(model, language)] += time.perf_counter() - started
    load_after_ingestion = load_average()

    print(
        f"backend {settings.EMBEDDING_BACKEND}; {args.queries} questions a language, {len(chunks['zh'])} Chinese and "
        f"{len(chunks['en'])} English chunks in batches of {batch}; seed {SEED}"
    )
    print("\nmemory of one process (VmRSS)")
    for label, megabytes, load_seconds in memory:
        took = f"  (loaded and first texts embedded in {load_seconds:.1f}s)" if load_seconds is not None else ""
        print(f"  {label:40} {megabytes:7.0f} MB{took}")
    print(
        f"  a web process holding both models: {memory[-1][1]:.0f} MB, {memory[-1][1] - memory[0][1]:.0f} MB of models"
    )

    print(f"\nquery embedding, one at a time (ms); {load_before} before, {load_after_queries} after")
    print(f"{'model':22} {'lang':4} {'p50':>7} {'p95':>7}")
    for model in models:
        for language in questions:
            values = latencies[(model, language)]
            print(f"{model:22} {language:4} {percentile(values, 0.5):7.2f} {percentile(values, 0.95):7.2f}")
    print(f"{'ratio ' + multilingual + ' p50 / ' + primary + ' p50':60} target <= {TARGET_RATIO:g}x")
    met = True
    for language in (*questions, "all"):
        languages = list(questions) if language == "all" else [language]

        def p50(model: str, languages: list[str] = languages) -> float:
            return percentile([value for lang in languages for value in latencies[(model, lang)]], 0.5)

        ratio = p50(multilingual) / p50(primary)
        met = met and ratio <= TARGET_RATIO
        print(f"  {language:4} {ratio:6.2f}x  {'within' if ratio <= TARGET_RATIO else 'NOT within'} {TARGET_RATIO:g}x")

    print(f"\ningestion, embed_texts in batches of {batch}; {load_after_ingestion} after")
    print(f"{'model':22} {'lang':4} {'chunks/s':>9} {'chars/s':>9} {'chars/chunk':>12}")
    for model in models:
        for language, texts in chunks.items():
            characters = sum(len(text) for text in texts)
            took = seconds[(model, language)]
            print(
                f"{model:22} {language:4} {len(texts) / took:9.1f} {characters / took:9.0f} "
                f"{characters / len(texts):12.0f}"
            )
    print(f"\n{load_average()} at the end")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
