"""`manage.py exclusion_window_bench --tenant SLUG --kb ID [--windows 1,5,10,20,50] [--queries N] [--repeats R]`:
the cost of the search a turn runs, and what it still returns, at each exclusion window size, on this deployment's
Milvus and one knowledge base's own data (docs/operations.md, "Sizing the exclusion window").

Reads only: it replays questions through the retrieval search, never through a turn, so it writes no turn, consumed
item or audit event, and the tenant's conversations are not touched. Run it with the settings of the web hosts, so
that the embedding model and Milvus are the ones turns use.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from conversations.dedup import decisions
from conversations.exclusion_window_bench import (
    NO_EXCLUSION,
    BenchSettings,
    ReplayQuestions,
    WindowFigures,
    exclusion_window_bench_run,
    replay_questions,
    windows_parse,
)
from conversations.models import DedupPolicy, Granularity
from conversations.services import TOP_K, policy_view
from kbplatform.errors import ApplicationError
from retrieval import embeddings, vectorstore
from retrieval.models import Chunk, KnowledgeBase
from retrieval.selectors import REFUSED_STATUSES, IndexStatus, embedding_model_mismatch, index_state, knowledge_base_get
from tenants.models import Tenant
from tenants.selectors import tenant_get_by_slug

DEFAULT_WINDOWS = "1,5,10,20,50"


class Command(BaseCommand):
    help = (
        "Time the search a conversation turn runs at each exclusion window size, on one knowledge base, and count "
        "what it still returns. Replays the knowledge base's latest stored questions (or, when it has too few, "
        "sampled chunk texts cut to a question's length), each embedded once. The exclusion list of a window of W "
        "turns is the one a conversation would have after W turns on the question's own topic: each turn showed "
        "the best results the earlier ones had not, so the list is as long as the window allows (W x results per "
        "turn ids, by the policy's granularity) and names exactly what the search would otherwise return: the "
        "realistic worst case, where exclusion both lengthens Milvus's filter and starves the results. "
        "Sizes are searched interleaved, so a change of load falls on all alike. Writes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--kb", required=True, type=int, help="knowledge base id (of that tenant)")
        parser.add_argument(
            "--windows",
            default=DEFAULT_WINDOWS,
            help=f"comma-separated window sizes in turns, 1 to 100 (default {DEFAULT_WINDOWS}); no exclusion is "
            "always measured too",
        )
        parser.add_argument("--queries", type=int, default=30, help="questions replayed (default 30)")
        parser.add_argument("--repeats", type=int, default=3, help="searches of each size per question (default 3)")
        parser.add_argument(
            "--granularity",
            choices=Granularity.values,
            help="what the exclusion list names: doc ids or chunk ids (default: the tenant's policy)",
        )
        parser.add_argument("--seed", type=int, default=0, help="seed of the chunk sample and of the search order")

    def handle(self, *args, **options) -> None:  # noqa: ANN002, ANN003
        try:
            windows = windows_parse(options["windows"])
        except ValueError as exc:
            raise CommandError(f"--windows {options['windows']!r}: {exc}. Give sizes such as 1,5,10,20,50.") from exc
        for name in ("queries", "repeats"):
            if options[name] < 1:
                raise CommandError(f"--{name} must be at least 1 (got {options[name]}).")
        try:
            self._bench(options, windows)
        except vectorstore.VectorStoreUnavailable as exc:
            raise CommandError(f"Milvus is unavailable ({exc}). Check MILVUS_URI, then run this again.") from exc
        except DatabaseError as exc:
            raise CommandError(f"The database is unavailable ({exc}). Run this again once it answers.") from exc
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc

    def _bench(self, options: dict, windows: list[int]) -> None:
        tenant = tenant_get_by_slug(slug=options["tenant"])
        if tenant is None:
            raise CommandError(f"No tenant with slug {options['tenant']!r}.")
        knowledge_base = knowledge_base_get(tenant=tenant, knowledge_base_id=options["kb"])
        if knowledge_base is None:
            raise CommandError(f"Tenant {tenant.slug!r} has no knowledge base with id {options['kb']}.")
        chunks = Chunk.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base).count()
        if not chunks:
            raise CommandError(
                f"Knowledge base {knowledge_base.name!r} (id {knowledge_base.pk}) holds no chunk: nothing to search. "
                "Ingest documents into it first."
            )
        model_identity = embeddings.model_identity()
        state = index_state(knowledge_base=knowledge_base, query_model_identity=model_identity)
        if state.status in REFUSED_STATUSES:
            refusal = embedding_model_mismatch(
                knowledge_base=knowledge_base, state=state, query_model_identity=model_identity
            )
            raise CommandError(refusal.message)
        vectors = vectorstore.vectors_count(
            tenant_id=tenant.pk, knowledge_base_id=knowledge_base.pk, dimension=knowledge_base.embedding_dimension
        )
        if not vectors:
            raise CommandError(
                f"Knowledge base {knowledge_base.name!r} (id {knowledge_base.pk}) has {chunks} chunk(s) but no vector "
                "in Milvus: its documents are not indexed yet (or were indexed into another MILVUS_COLLECTION)."
            )

        stored = DedupPolicy.objects.for_tenant(tenant).first()
        policy = policy_view(stored) if stored is not None else decisions.PolicyView()
        bench = BenchSettings(
            windows=windows,
            granularity=options["granularity"] or policy.granularity,
            results_per_turn=TOP_K,
            min_results=policy.min_results,
            repeats=options["repeats"],
            seed=options["seed"],
        )
        replay = replay_questions(tenant=tenant, knowledge_base=knowledge_base, count=options["queries"])
        self._intro(tenant, knowledge_base, chunks, vectors, policy, stored is not None, bench, replay)
        if state.status == IndexStatus.REINDEXING:
            self.stdout.write(
                "A re-index of the knowledge base is running: vectors not rebuilt yet rank at random, so these "
                "figures are not the knowledge base's once it ends."
            )
        figures = exclusion_window_bench_run(
            tenant=tenant,
            knowledge_base=knowledge_base,
            questions=replay.questions,
            query_model_identity=model_identity,
            bench=bench,
            progress=self.stderr._out,
        )
        self._table(figures, bench)

    def _intro(
        self,
        tenant: Tenant,
        knowledge_base: KnowledgeBase,
        chunks: int,
        vectors: int,
        policy: decisions.PolicyView,
        has_policy: bool,
        bench: BenchSettings,
        replay: ReplayQuestions,
    ) -> None:
        self.stdout.write(
            f"Knowledge base {knowledge_base.name!r} (id {knowledge_base.pk}) of tenant {tenant.slug!r}: {chunks} "
            f"chunk(s), {vectors} vector(s) in Milvus; embedding model {embeddings.model_name()}."
        )
        source = "the tenant's policy" if has_policy else "the default policy: the tenant has none yet"
        self.stdout.write(
            f"Policy ({source}): exclusion window {policy.exclusion_window}, by {policy.granularity} ids, relaxed "
            f"below {policy.min_results} result(s); a turn shows {bench.results_per_turn}. Benched by "
            f"{bench.granularity} ids."
        )
        if replay.sampled and replay.stored:
            questions = (
                f"the {replay.stored} latest stored question(s) of the knowledge base, then {replay.sampled} sampled "
                "chunk text(s) (too few stored questions)"
            )
        elif replay.sampled:
            questions = f"{replay.sampled} sampled chunk text(s) (the knowledge base has no stored question)"
        else:
            questions = f"the {replay.stored} latest stored question(s) of the knowledge base"
        self.stdout.write(
            f"Questions: {questions}; each size searched {bench.repeats} time(s) a question, interleaved."
        )

    def _table(self, figures: list[WindowFigures], bench: BenchSettings) -> None:
        self.stdout.write("")
        self.stdout.write(
            f"{'window':>6}  {'excluded':>8}  {'max':>5}  {'p50 ms':>7}  {'p95 ms':>7}  {'p50/none':>8}  "
            f"{'results':>7}  {'relaxed':>7}"
        )
        for row in figures:
            window = "none" if row.window == NO_EXCLUSION else str(row.window)
            self.stdout.write(
                f"{window:>6}  {row.excluded_mean:>8.1f}  {row.excluded_max:>5}  {row.p50_ms:>7.1f}  "
                f"{row.p95_ms:>7.1f}  {row.p50_ratio:>7.2f}x  {row.results_mean:>7.2f}  {row.relaxed_share:>6.0%}"
            )
        self.stdout.write(
            f"excluded: ids on the list (mean, max); results: what the search returned of {bench.results_per_turn} "
            "(mean); relaxed: searches left below the policy's minimum, for which a turn searches again without "
            "exclusion (a second search's cost)."
        )
