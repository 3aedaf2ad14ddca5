"""`manage.py text_reading_reindex`: re-index, once after an upgrade, the knowledge bases holding text that the release
reads otherwise than the one that indexed it: Traditional Chinese characters, which the multilingual model reads as
Simplified ones (`embeddings.model_input`) and a `chinese` knowledge base's BM25 field holds so; full-width Latin
letters and digits ("ＡＰＩ", "１２３", typed in an input method's full-width mode), which the bundled model and every
BM25 field read as ASCII (`embeddings.characters_read`, `vectorstore.bm25_document_text`); Han, kana, Hangul and
Thai, which an `english` BM25 field holds as overlapping pairs of letters, combining marks, which it holds as letters
or leaves out, and Cyrillic, Arabic, Devanagari and Greek words, which it holds as their stems
(`kbplatform.text.unspaced_runs_paired`, `marks_as_letters`, `kbplatform.stems.words_stemmed`).

Until then such a knowledge base keeps the vectors and BM25 text its chunks were indexed with: every search still
works, but a question reaches those chunks as the new reading has it, so they rank lower than they will. The re-index
keeps the model and the chunk ids (stored answers citing them stay servable); only the vectors of chunks whose input
changed are encoded again, the rest come from the embedding cache.

A chunk is counted when the model now reads it otherwise than its vector was made from (its `model_input_hash`), or
when its BM25 field now holds it otherwise than as written (the field itself is not read back: a chunk indexed since
the upgrade is counted too, and its re-index costs little, every vector being cached). Without options each such
knowledge base is listed with its count and its re-index queued (the workers run it; follow `reindex_status`);
`--list` only lists."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from kbplatform.errors import ConflictError
from retrieval import embeddings, services, vectorstore
from retrieval.chunking import model_input_hash
from retrieval.management.tenant_option import tenant_option_add, tenants_chosen
from retrieval.models import Chunk, KnowledgeBase


def chunks_read_anew(knowledge_base: KnowledgeBase) -> int:
    """How many chunks of `knowledge_base` this release reads otherwise than they were indexed (see the module doc)."""
    model = embeddings.knowledge_base_model(knowledge_base.embedding_model)
    analyzer = knowledge_base.text_analyzer
    rows = (
        Chunk.objects.for_tenant(knowledge_base.tenant)
        .filter(knowledge_base=knowledge_base)
        .values_list("text", "model_input_hash")
    )
    return sum(
        model_input_hash(text, model) != recorded or vectorstore.bm25_document_text(text, analyzer) != text
        for text, recorded in rows.iterator(chunk_size=2000)
    )


class Command(BaseCommand):
    help = (
        "Re-index the knowledge bases holding text this release reads otherwise (Traditional Chinese, full-width "
        "letters and digits, Han, kana, Hangul, Thai, combining marks and Cyrillic, Arabic, Devanagari and Greek words "
        "in an English BM25 field)."
    )
    nothing_found = "No knowledge base holds text this release reads otherwise: nothing to re-index."

    def add_arguments(self, parser: CommandParser) -> None:
        tenant_option_add(parser)
        parser.add_argument("--list", action="store_true", help="Only list them; queue nothing.")

    def handle(self, *args: object, **options: object) -> None:
        found = 0
        for tenant in tenants_chosen(options["tenant"]):
            for knowledge_base in KnowledgeBase.objects.for_tenant(tenant).order_by("pk"):
                count = chunks_read_anew(knowledge_base)
                if not count:
                    continue
                found += 1
                label = f"{tenant.slug}/{knowledge_base.pk} {knowledge_base.name!r}"
                self.stdout.write(f"{label}: {count} chunks read otherwise since they were indexed")
                if options["list"]:
                    continue
                try:
                    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=knowledge_base)
                except ConflictError as exc:
                    self.stdout.write(f"{label}: not queued: {exc.message}")
                    continue
                self.stdout.write(f"{label}: re-index queued")
        if not found:
            self.stdout.write(self.nothing_found)
