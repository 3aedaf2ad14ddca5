"""`manage.py text_index`: move the knowledge bases made before full-text search into the full-text collection, so
that they can be searched in `full_text` and `hybrid` mode. Online: each keeps answering (semantic) while it moves.

Without options it lists where every knowledge base stands and queues the move of each one not moved yet (the workers
run it; its progress is the knowledge base's `text_index_progress`); `--inline` runs the moves here, one after the
other, printing their progress. Running it again resumes a move that stopped."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from retrieval import services
from retrieval.management.tenant_option import tenant_option_add, tenants_chosen
from retrieval.models import KnowledgeBase, TextIndexStatus


class Command(BaseCommand):
    help = "Move knowledge bases made before full-text search into the full-text collection (online, resumable)."

    def add_arguments(self, parser: CommandParser) -> None:
        tenant_option_add(parser)
        parser.add_argument("--knowledge-base", type=int, help="Only this knowledge base (its id).")
        parser.add_argument("--inline", action="store_true", help="Run the moves here instead of queueing them.")
        parser.add_argument("--list", action="store_true", help="Only say where each knowledge base stands.")

    def handle(self, *args: object, **options: object) -> None:
        tenants = tenants_chosen(options["tenant"])
        knowledge_bases = []
        for tenant in tenants:
            queryset = KnowledgeBase.objects.for_tenant(tenant).order_by("pk")
            if options["knowledge_base"]:
                queryset = queryset.filter(pk=options["knowledge_base"])
            knowledge_bases += [(tenant, knowledge_base) for knowledge_base in queryset]
        if options["knowledge_base"] and not knowledge_bases:
            raise CommandError(f"No knowledge base {options['knowledge_base']}.")
        pending = [(t, kb) for t, kb in knowledge_bases if kb.text_index != TextIndexStatus.READY]
        for tenant, kb in knowledge_bases:
            error = f" ({kb.text_index_error})" if kb.text_index_error else ""
            self.stdout.write(
                f"{tenant.slug}/{kb.pk} {kb.name!r}: {kb.text_index} {kb.text_index_progress:.0%}, "
                f"retrieval_mode {kb.retrieval_mode}{error}"
            )
        if options["list"]:
            return
        if not pending:
            self.stdout.write("Every knowledge base's chunks carry their text: nothing to move.")
            return
        for tenant, kb in pending:
            services.knowledge_base_text_index_start(tenant=tenant, knowledge_base=kb, queue=not options["inline"])
            if not options["inline"]:
                self.stdout.write(f"queued the move of {tenant.slug}/{kb.pk}")
                continue

            def report(done: int, total: int, label: str = f"{tenant.slug}/{kb.pk}") -> None:
                self.stdout.write(f"{label}: {done}/{total} chunks")

            try:
                copied = services.knowledge_base_text_index(
                    tenant_id=tenant.pk, knowledge_base_id=kb.pk, progress=report
                )
            except services.TransientIngestError as exc:
                raise CommandError(f"The move of {tenant.slug}/{kb.pk} stopped ({exc}); run this again.") from exc
            kb.refresh_from_db()
            if kb.text_index != TextIndexStatus.READY:
                raise CommandError(f"{tenant.slug}/{kb.pk} was not moved: {kb.text_index_error or 'see the logs'}")
            self.stdout.write(self.style.SUCCESS(f"{tenant.slug}/{kb.pk}: moved, {copied} chunks"))
