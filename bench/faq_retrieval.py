"""FAQ-style retrieval through the platform, on the Chinese question sets (issue 35, "Must show") and on help-centre
pairs in Japanese, Korean, Thai, Hindi, Russian, Arabic, Spanish, French and German written here: the same documents
indexed into a knowledge base of the multilingual model and one of the bundled model, searched through
`POST /api/v1/knowledge-bases/{id}/search/` (`selectors.chunk_search`), in one run.

    .venv/bin/python bench/faq_retrieval.py [--sets bq,lcqmc,afqmc,oppo,faq_ja,faq_ja_check,faq_ko,
                                            faq_th,faq_hi,faq_ru,faq_ar,faq_es,faq_fr,faq_de] [--pairs N]
                                            [--modes hybrid,semantic] [--models M,...] [--analyzers chinese,english,...]
                                            [--traditional] [--traditional-documents]

For each set, a seeded sample of --pairs duplicate pairs (all with 0): the second questions are the documents (one per
FAQ answer, identical texts once), the first questions the queries, and a query's relevant documents are the second
questions it was labelled a duplicate of (bench/embedding_multilingual.py's `faq_split`, which measured the models'
cosines alone). `faq_ja`, `faq_ja_check`, `faq_ko`, `faq_th`, `faq_hi`, `faq_ru`, `faq_ar`, `faq_es`, `faq_fr` and
`faq_de` are Japanese, Korean, Thai, Hindi, Russian, Arabic, Spanish, French and German help-centre pairs written here
(bench/data/README.md), all duplicates, read the same way. A knowledge base is made through the API for each model and
each of --analyzers (default chinese: the BM25 side of one analyser is the same on every model's knowledge base, and
only the vectors differ), and takes the documents as text through the bulk API and the worker (the real ingestion path).
Each query is searched in each of --modes on each knowledge base (hybrid is a new knowledge base's mode, fused by rank;
`hybrid:W` sets the knowledge base's `hybrid_dense_weight` to W, scores weighted, before its searches; semantic shows
each model's vectors alone), and once in full_text per analyser (BM25 alone: the same on every model's knowledge base).

With --traditional, each query is also searched in Traditional characters (OpenCC's `s2t`, as a user in Taiwan or Hong
Kong writes it) over the same Simplified documents, a row of its own ("... trad."); --models keeps some of the
knowledge bases. With --traditional-documents the documents themselves are indexed in Traditional characters (a help
centre in Taiwan or Hong Kong): with --traditional, each query is then searched as written in Simplified characters
(a mainland user) and in Traditional ones.

Prints per set and per knowledge base and mode: success@5 (a relevant document among the 5 first) and MRR@10, with
the search's p50 latency and the load average beside it (indicative: the figures that matter are quality).
The database is SQLite under var/bench unless DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
import uuid
import zlib
from pathlib import Path

import numpy as np
from common import (
    documents_through_api,
    knowledge_base_through_api,
    load_average,
    mode_label,
    modes_parse,
    platform,
    tenant_api_client,
    worker,
)
from embedding_multilingual import CHINESE_SETS, PAIR_SETS, SEED, faq_split, pairs_read, pairs_sampled
from retrieval_quality import reciprocal_rank

from kbplatform.stems import LATIN_LANGUAGES

MODELS = ("use-multilingual-v3", "all-MiniLM-L6-v2")
ANALYZERS = ("chinese", "english", *LATIN_LANGUAGES)
WRITTEN_HERE = Path(__file__).resolve().parent / "data"
SETS = {
    **{name: PAIR_SETS[name] for name in CHINESE_SETS},
    **{
        name: WRITTEN_HERE / f"{name}.jsonl"
        for name in (
            "faq_ja",
            "faq_ja_check",
            "faq_ko",
            "faq_th",
            "faq_th_check",
            "faq_hi",
            "faq_ru",
            "faq_ru_check",
            "faq_ar",
            "faq_ar_check",
            "faq_es",
            "faq_fr",
            "faq_de",
            "faq_pt",
            "faq_it",
            "faq_nl",
            "faq_tr",
            "faq_pl",
            "faq_id",
            "faq_el",
            "faq_sv",
            "faq_da",
            "faq_no",
            "faq_fi",
            "faq_hu",
            "faq_ro",
            "faq_cs",
            "faq_ca",
            "faq_sr",
            "faq_fa",
        )
    },
}
TOP, DEPTH = 5, 10


def success_at(ranked: list[str], relevant: set[str], k: int = TOP) -> float:
    return float(bool(set(ranked[:k]) & relevant))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(CHINESE_SETS), help=f"comma-separated, of {', '.join(SETS)}")
    parser.add_argument("--pairs", type=int, default=1000, help="duplicate pairs per set, a seeded sample (0 = all)")
    parser.add_argument("--modes", default="hybrid,semantic", help="retrieval modes searched on both knowledge bases")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--analyzers", default="chinese", help=f"comma-separated, of {', '.join(ANALYZERS)}")
    parser.add_argument("--traditional", action="store_true", help="also search each query in Traditional characters")
    parser.add_argument(
        "--traditional-documents", action="store_true", help="index the documents in Traditional characters"
    )
    args = parser.parse_args()
    models = [model.strip() for model in args.models.split(",") if model.strip()]
    if unknown := set(models) - set(MODELS):
        parser.error(f"unknown models: {', '.join(sorted(unknown))}")
    sets = [name.strip() for name in args.sets.split(",") if name.strip()]
    if unknown := set(sets) - set(SETS):
        parser.error(f"unknown sets: {', '.join(sorted(unknown))}")
    analyzers = [analyzer.strip() for analyzer in args.analyzers.split(",") if analyzer.strip()]
    if unknown := set(analyzers) - set(ANALYZERS):
        parser.error(f"unknown analysers: {', '.join(sorted(unknown))}")
    modes = modes_parse(args.modes)
    run = uuid.uuid4().hex[:8]
    os.environ["KB_CACHE_PREFIX"] = f"bench-faq-{run}"
    os.environ["KB_RATE_LIMIT"] = ""

    faqs = {}
    for name in sets:
        duplicates = [pair for pair in pairs_read(SETS[name]) if pair.duplicate]
        rng = np.random.default_rng([SEED, zlib.crc32(name.encode())])
        faqs[name] = faq_split(pairs_sampled(duplicates, args.pairs or None, rng))
    if args.traditional or args.traditional_documents:
        from opencc import OpenCC

        to_traditional = OpenCC("s2t")
    if args.traditional_documents:
        faqs = {
            name: (queries, [to_traditional.convert(text) for text in documents], relevant)
            for name, (queries, documents, relevant) in faqs.items()
        }

    with platform(name=f"faq_{run}") as env, worker(env):
        from django.db import connection

        tenant, client = tenant_api_client(slug=f"bench-faq-{run}", name="FAQ retrieval")
        print(f"database: {connection.vendor}; seed {SEED}; {load_average()} at the start")
        rows = []
        for name in sets:
            queries, documents, relevant = faqs[name]
            written = "Traditional" if args.traditional_documents else "Simplified"
            script = f", {written} characters" if name in CHINESE_SETS else ""
            print(f"\n{name}: {len(queries)} queries, {len(documents)} documents (FAQ answers{script})")
            knowledge_bases = {}
            for model, analyzer in itertools.product(models, analyzers):
                knowledge_base = knowledge_base_through_api(
                    tenant=tenant,
                    client=client,
                    name=f"faq-{name}-{model}-{analyzer}",
                    embedding_model=model,
                    text_analyzer=analyzer,
                )
                started = time.perf_counter()
                documents_through_api(
                    tenant=tenant,
                    client=client,
                    knowledge_base=knowledge_base,
                    documents=[
                        {"title": f"{name}-{index}", "external_id": str(index), "text": text}
                        for index, text in enumerate(documents)
                    ],
                    label=knowledge_base.name,
                )
                print(
                    f"  {model}: indexed in {time.perf_counter() - started:.0f}s "
                    f"(mode {knowledge_base.retrieval_mode}, analyser {knowledge_base.text_analyzer}); {load_average()}"
                )
                knowledge_bases[model, analyzer] = knowledge_base
            searches = [
                *itertools.product(models, analyzers, modes),
                *((models[0], analyzer, ("full_text", None)) for analyzer in analyzers),
            ]
            spellings = [("", queries)]
            if args.traditional:
                spellings.append((" trad.", [to_traditional.convert(query) for query in queries]))
            for (model, analyzer, (mode, weight)), (spelling, asked) in itertools.product(searches, spellings):
                knowledge_base_url = f"/api/v1/knowledge-bases/{knowledge_bases[model, analyzer].pk}/"
                if mode == "hybrid":
                    # A search names its mode; a hybrid search's fusion is the knowledge base's setting.
                    response = client.patch(knowledge_base_url, {"hybrid_dense_weight": weight}, format="json")
                    if response.status_code != 200:
                        raise SystemExit(f"fusion refused ({response.status_code}): {response.content[:300]!r}")
                url = f"{knowledge_base_url}search/"
                firsts, successes, reciprocal_ranks, latencies = [], [], [], []
                for query, wanted in zip(asked, relevant, strict=True):
                    started = time.perf_counter()
                    response = client.post(url, {"query": query, "limit": DEPTH, "retrieval_mode": mode}, format="json")
                    latencies.append((time.perf_counter() - started) * 1000)
                    if response.status_code != 200:
                        raise SystemExit(f"search refused ({response.status_code}): {response.content[:300]!r}")
                    ranked = [hit["document_external_id"] for hit in response.json()["results"]]
                    wanted_ids = {str(index) for index in wanted}
                    firsts.append(success_at(ranked, wanted_ids, 1))
                    successes.append(success_at(ranked, wanted_ids))
                    reciprocal_ranks.append(reciprocal_rank(ranked, wanted_ids, DEPTH))
                label = "any (BM25 alone)" if mode == "full_text" else model
                rows.append(
                    (
                        name,
                        label,
                        analyzer,
                        mode_label(mode, weight) + spelling,
                        len(queries),
                        float(np.mean(firsts)),
                        float(np.mean(successes)),
                        float(np.mean(reciprocal_ranks)),
                        statistics.median(latencies),
                        load_average(),
                    )
                )
                print(
                    f"  {label:20} {analyzer:8} {rows[-1][3]:16} success@1 {rows[-1][5]:.3f} success@{TOP} "
                    f"{rows[-1][6]:.3f}  MRR@{DEPTH} {rows[-1][7]:.3f}  p50 {rows[-1][8]:.1f} ms; {rows[-1][9]}",
                    file=sys.stderr,
                )

        print()
        print(
            f"{'set':6} {'knowledge base':20} {'analyser':8} {'mode':16} {'queries':>7} {'S@1':>6} {f'S@{TOP}':>6} "
            f"{f'MRR@{DEPTH}':>7} {'p50 ms':>7}  load"
        )
        for name, label, analyzer, mode, count, first, success, mrr, p50, load in rows:
            print(
                f"{name:6} {label:20} {analyzer:8} {mode:16} {count:>7} {first:>6.3f} {success:>6.3f} {mrr:>7.3f} "
                f"{p50:>7.1f}  {load}"
            )
        print(f"{load_average()} at the end")
        return 0


if __name__ == "__main__":
    sys.exit(main())
