"""`manage.py traditional_chinese_reindex`: re-index the knowledge bases whose documents hold Traditional Chinese
characters, once, after upgrading to a release where the multilingual model reads them as Simplified ones
(`embeddings.model_input`) and a `chinese` knowledge base's BM25 field holds them so (`vectorstore.bm25_document_text`).

Until then such a knowledge base keeps the vectors and BM25 text its chunks were indexed with, which read Traditional
text as written: every search still works, but a question in either script now reaches them as Simplified text, so
they rank lower than they will. The re-index keeps the model and the chunk ids (stored answers citing them stay
servable); only the vectors of chunks whose input changed are encoded again, the rest come from the embedding cache.

Without options it lists each such knowledge base with how many of its chunks hold Traditional characters and queues
its re-index (the workers run it; follow `reindex_status`); `--list` only lists. Running it again re-indexes them
again, which costs little: every vector is then cached."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser
from django.db.models import Q

from kbplatform import chinese_script
from kbplatform.errors import ConflictError
from retrieval import embeddings, services
from retrieval.management.tenant_option import tenant_option_add, tenants_chosen
from retrieval.models import Chunk, KnowledgeBase, TextAnalyzer


def traditional_chunks(knowledge_base: KnowledgeBase) -> int:
    """How many chunks of `knowledge_base` hold a character the Simplified reading changes."""
    texts = Chunk.objects.for_tenant(knowledge_base.tenant).filter(knowledge_base=knowledge_base).values_list("text")
    return sum(chinese_script.simplified_unless_japanese(text) != text for (text,) in texts.iterator(chunk_size=2000))


class Command(BaseCommand):
    help = "Re-index the knowledge bases holding Traditional Chinese text, read as Simplified since this release."

    def add_arguments(self, parser: CommandParser) -> None:
        tenant_option_add(parser)
        parser.add_argument("--list", action="store_true", help="Only list them; queue nothing.")

    def handle(self, *args: object, **options: object) -> None:
        tenants = tenants_chosen(options["tenant"])
        # Only these read Chinese otherwise now: the multilingual model's vectors and the chinese analyser's BM25.
        reads_anew = Q(embedding_model=embeddings.USE_MODEL_NAME) | Q(text_analyzer=TextAnalyzer.CHINESE)
        found = 0
        for tenant in tenants:
            for knowledge_base in KnowledgeBase.objects.for_tenant(tenant).filter(reads_anew).order_by("pk"):
                count = traditional_chunks(knowledge_base)
                if not count:
                    continue
                found += 1
                label = f"{tenant.slug}/{knowledge_base.pk} {knowledge_base.name!r}"
                self.stdout.write(f"{label}: {count} chunks with Traditional characters")
                if options["list"]:
                    continue
                try:
                    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=knowledge_base)
                except ConflictError as exc:
                    self.stdout.write(f"{label}: not queued: {exc.message}")
                    continue
                self.stdout.write(f"{label}: re-index queued")
        if not found:
            self.stdout.write("No knowledge base holds Traditional Chinese text: nothing to re-index.")
