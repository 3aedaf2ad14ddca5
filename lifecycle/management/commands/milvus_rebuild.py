"""`manage.py milvus_rebuild [--tenant SLUG] [--knowledge-base ID] [--questions]`: write Milvus again from the
database after it lost its data (docs/operations.md, "Recovery drill: Milvus lost its data"). Online: run it with the
platform up; each knowledge base is searched again once it is rebuilt, and answers 503 until then.

Without options: the question collections of every tenant (quick: the turns' stored vectors; the collection of the
model in use is made again first when it predates each question's metadata filter key), then every knowledge base,
one after the other, with a progress bar each and its chunks per second. Safe to run again, or after it stopped:
every write is an upsert by id, and vectors come from the embedding cache (the model runs only for what it lacks)."""

from __future__ import annotations

import sys
import time

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from kbplatform.errors import ApplicationError, ConflictError
from lifecycle import rebuild
from retrieval.models import KnowledgeBase
from retrieval.services import TransientIngestError
from retrieval.vectorstore import VectorStoreUnavailable


class Command(BaseCommand):
    help = "Rebuild Milvus (chunk vectors and question collections) from the database, online and resumable."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="Only this tenant's knowledge bases and questions (its slug).")
        parser.add_argument("--knowledge-base", type=int, help="Only this knowledge base's chunks (its id).")
        parser.add_argument("--questions", action="store_true", help="Only the question collections.")

    def handle(self, *args: object, **options: object) -> None:
        try:
            scope = rebuild.rebuild_scope_get(
                tenant_slug=options["tenant"],
                knowledge_base_id=options["knowledge_base"],
                questions_only=options["questions"],
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        started = time.monotonic()
        failures: list[str] = []
        if scope.questions:
            self._questions(scope, every_tenant=not options["tenant"])
        chunks = 0
        for knowledge_base in scope.knowledge_bases:
            try:
                chunks += self._knowledge_base(knowledge_base)
            except (ConflictError, TransientIngestError, VectorStoreUnavailable) as exc:
                label = f"{knowledge_base.tenant.slug}/{knowledge_base.pk}"
                failures.append(f"{label}: {exc.message if isinstance(exc, ApplicationError) else exc}")
                self.stderr.write(self.style.ERROR(f"{label} not rebuilt: {failures[-1]}"))
        rebuild.rebuild_flush()
        seconds = time.monotonic() - started
        rate = f", {chunks / seconds:.0f} chunks/s" if chunks and seconds else ""
        self.stdout.write(
            f"rebuilt {len(scope.knowledge_bases) - len(failures)} of {len(scope.knowledge_bases)} knowledge bases "
            f"({chunks} chunks) in {seconds:.1f} s{rate}"
        )
        if failures:
            raise CommandError(f"{len(failures)} knowledge bases not rebuilt; run this again for them.")

    def _questions(self, scope: rebuild.RebuildScope, *, every_tenant: bool) -> None:
        try:
            if every_tenant:
                dropped = rebuild.question_collection_rekey()
                if dropped:
                    self.stdout.write(f"{dropped}: made again with each question's metadata filter key")
            elif rebuild.question_collection_needs_rekey():
                self.stderr.write(
                    self.style.WARNING(
                        "The question collection predates each question's metadata filter key; run "
                        "`milvus_rebuild --questions` for every tenant to make it again with the key."
                    )
                )
        except VectorStoreUnavailable as exc:
            raise CommandError(f"Milvus is unavailable ({exc}); start it, then run this again.") from exc
        for tenant in scope.tenants:
            with tqdm(desc=f"{tenant.slug} questions", unit="question", file=sys.stderr, leave=False) as bar:
                try:
                    count = rebuild.questions_rebuild(tenant=tenant, progress=bar.update)
                except VectorStoreUnavailable as exc:
                    raise CommandError(f"Milvus is unavailable ({exc}); start it, then run this again.") from exc
            self.stdout.write(f"{tenant.slug}: {count} questions indexed")

    def _knowledge_base(self, knowledge_base: KnowledgeBase) -> int:
        label = f"{knowledge_base.tenant.slug}/{knowledge_base.pk}"
        total = rebuild.knowledge_base_rebuild_size(knowledge_base=knowledge_base)
        started = time.monotonic()
        with tqdm(total=total, desc=label, unit="chunk", file=sys.stderr, leave=False) as bar:

            def report(done: int, known: int) -> None:
                bar.total = max(known, done)
                bar.update(done - bar.n)

            written = rebuild.knowledge_base_vectors_rebuild(knowledge_base=knowledge_base, progress=report)
        seconds = time.monotonic() - started
        rate = f", {written / seconds:.0f} chunks/s" if written and seconds else ""
        self.stdout.write(
            self.style.SUCCESS(f"{label} {knowledge_base.name!r}: {written} chunks in {seconds:.1f} s{rate}")
        )
        return written
