from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from retrieval import vectorstore
from tenants.scoping import TenantOwnedModel

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
DEFAULT_EMBEDDING_DIMENSION = 384
# `KnowledgeBase.reindex_from_model_identity` of a re-index that failed before the field was recorded (migration 0012):
# whether it was changing the model is not known, so it counts as one that was.
REINDEX_FROM_UNRECORDED = "unrecorded"


class RetrievalMode(models.TextChoices):
    SEMANTIC = vectorstore.SEMANTIC, "semantic (vectors)"
    FULL_TEXT = vectorstore.FULL_TEXT, "full text (BM25)"
    HYBRID = vectorstore.HYBRID, "hybrid (vectors and BM25, fused)"


class TextAnalyzer(models.TextChoices):
    ENGLISH = vectorstore.ENGLISH, "English"
    CHINESE = vectorstore.CHINESE, "Chinese (jieba)"
    # Languages written in Latin letters whose words are stemmed in that language (`kbplatform.stems`).
    SPANISH = "spanish", "Spanish"
    FRENCH = "french", "French"
    GERMAN = "german", "German"
    PORTUGUESE = "portuguese", "Portuguese"
    ITALIAN = "italian", "Italian"
    DUTCH = "dutch", "Dutch"
    TURKISH = "turkish", "Turkish"
    POLISH = "polish", "Polish"
    INDONESIAN = "indonesian", "Indonesian"
    SWEDISH = "swedish", "Swedish"
    DANISH = "danish", "Danish"
    NORWEGIAN = "norwegian", "Norwegian"
    FINNISH = "finnish", "Finnish"
    HUNGARIAN = "hungarian", "Hungarian"
    ROMANIAN = "romanian", "Romanian"
    CZECH = "czech", "Czech"
    CATALAN = "catalan", "Catalan"
    SERBIAN = "serbian", "Serbian"


class TextIndexStatus(models.TextChoices):
    READY = vectorstore.TextIndex.READY
    MISSING = vectorstore.TextIndex.MISSING
    BUILDING = vectorstore.TextIndex.BUILDING


# What a new knowledge base searches with (rank fusion: `hybrid_dense_weight` null); docs/ingestion.md says why.
DEFAULT_RETRIEVAL_MODE = RetrievalMode.HYBRID


class ReindexStatus(models.TextChoices):
    IDLE = "idle"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class KnowledgeBase(TenantOwnedModel):
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    embedding_model = models.CharField(max_length=200, default=DEFAULT_EMBEDDING_MODEL)
    # `embeddings.model_identity()` of the model that made the knowledge base's vectors (its name and a digest of its
    # files), so a model replaced in place under the same name is noticed as a change; empty until a worker records it.
    embedding_model_identity = models.CharField(max_length=200, blank=True, default="")
    embedding_dimension = models.PositiveIntegerField(default=DEFAULT_EMBEDDING_DIMENSION)
    chunk_max_tokens = models.PositiveIntegerField(
        default=200,
        validators=[MinValueValidator(16), MaxValueValidator(256)],
        help_text="Largest chunk, in the embedding model's word pieces (all-MiniLM-L6-v2 reads at most 256).",
    )
    chunk_overlap_tokens = models.PositiveIntegerField(default=32, validators=[MaxValueValidator(128)])
    reindex_status = models.CharField(max_length=10, choices=ReindexStatus.choices, default=ReindexStatus.IDLE)
    reindex_progress = models.FloatField(default=0.0)
    reindex_error = models.TextField(blank=True, default="")
    reindex_started_at = models.DateTimeField(null=True, blank=True)
    reindex_finished_at = models.DateTimeField(null=True, blank=True)
    # The re-index run that holds the knowledge base, leased as a document's run is: claimed by one conditional UPDATE,
    # the lease renewed with each batch. A running re-index whose lease ran out was lost (its worker killed, its task
    # never delivered) and is queued again by `knowledge_base_reindexes_recover`.
    reindex_claim_token = models.CharField(max_length=32, blank=True, default="")
    reindex_lease_expires_at = models.DateTimeField(null=True, blank=True)
    reindex_attempts = models.PositiveIntegerField(default=0)
    # The identity the knowledge base recorded before a re-index moved it to another model (set when a run claims such
    # a re-index), kept until a re-index finishes: while it is set and the re-index is not running, the vectors that
    # re-index did not reach are that model's, mixed with the new one's (`selectors.index_state`: REINDEX_FAILED).
    # Blank when the last re-index kept the model (a rebuild stopped part way leaves every vector the model's).
    reindex_from_model_identity = models.CharField(max_length=200, blank=True, default="", db_default="")
    # How searches and turns rank the knowledge base's chunks. FULL_TEXT and HYBRID need its chunks' text in Milvus
    # (`text_index` READY): a knowledge base from before full text is semantic until it is moved over.
    # The database defaults are for rows that the last release's web and workers insert while `migrate` runs: their
    # chunks go to the collection of vectors only, so they search as before and have no text in Milvus.
    retrieval_mode = models.CharField(
        max_length=10, choices=RetrievalMode.choices, default=DEFAULT_RETRIEVAL_MODE, db_default=RetrievalMode.SEMANTIC
    )
    # HYBRID's fusion: reciprocal rank fusion when null, else weighted scores, this share for the vector side.
    hybrid_dense_weight = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Hybrid only: blank fuses by rank (RRF); a number from 0 to 1 weighs the vector side's scores.",
    )
    # Which analyser splits its chunks' text into BM25 terms; once it holds chunks, changed only by a re-index
    # (`knowledge_base_reindex_start`), which rewrites their terms.
    text_analyzer = models.CharField(
        max_length=10, choices=TextAnalyzer.choices, default=TextAnalyzer.ENGLISH, db_default=TextAnalyzer.ENGLISH
    )
    # Whether its chunks' text is in Milvus (`vectorstore.TextIndex`): READY from the start for a knowledge base made by
    # this release; MISSING for one from before until `manage.py text_index` has copied its chunks over (BUILDING).
    text_index = models.CharField(
        max_length=10,
        choices=TextIndexStatus.choices,
        default=TextIndexStatus.READY,
        db_default=TextIndexStatus.MISSING,
    )
    text_index_progress = models.FloatField(default=0.0, db_default=0.0)
    text_index_error = models.TextField(blank=True, default="", db_default="")
    # A move (`text_index` BUILDING) holds a lease, as a re-index does: set when it is queued (covering the wait in the
    # queue and a retry's countdown), renewed with each batch, cleared when it is done or stopped for a reason a retry
    # would not change. A moving knowledge base whose lease ran out lost its run and is queued again by
    # `knowledge_base_text_indexes_recover`; `text_index_attempts` counts those lost runs.
    text_index_lease_expires_at = models.DateTimeField(null=True, blank=True)
    text_index_attempts = models.PositiveIntegerField(default=0, db_default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="kb_unique_name_per_tenant")]

    def __str__(self) -> str:
        return self.name


class DocumentStatus(models.TextChoices):
    QUEUED = "queued"
    PARSING = "parsing"
    CHUNKING = "chunking"
    EMBEDDING = "embedding"
    INDEXING = "indexing"
    INDEXED = "indexed"
    FAILED = "failed"


class SourceKind(models.TextChoices):
    FILE = "file"
    TEXT = "text"
    CHUNKS = "chunks"


class Document(TenantOwnedModel):
    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="documents")
    title = models.CharField(max_length=500)
    external_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 (NULL keeps uniqueness optional)
    source_kind = models.CharField(max_length=10, choices=SourceKind.choices, default=SourceKind.TEXT)
    source_file = models.FileField(upload_to="documents/%Y/%m/", null=True, blank=True, max_length=500)
    source_filename = models.CharField(max_length=255, blank=True, default="")
    source_text = models.TextField(blank=True, default="")
    source_chunks = models.JSONField(null=True, blank=True)
    # The client's own description of the document (`retrieval.metadata`: bounded size and depth, safe keys), copied
    # onto every vector of the document so a search filters by it inside Milvus, together with the tenant.
    metadata = models.JSONField(default=dict, blank=True, db_default={})
    # A pre-chunked document whose chunks may be split at sentence boundaries when longer than the knowledge base's
    # chunk size (`chunking.prechunked_drafts`), instead of being refused.
    split_oversize_chunks = models.BooleanField(default=False, db_default=False)
    content_type = models.CharField(max_length=100, blank=True, default="")
    content_hash = models.CharField(max_length=64, blank=True, default="")
    size_bytes = models.BigIntegerField(default=0)
    status = models.CharField(max_length=10, choices=DocumentStatus.choices, default=DocumentStatus.QUEUED)
    progress = models.FloatField(default=0.0, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)])
    chunk_count = models.PositiveIntegerField(default=0)
    error_message = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    # The run that holds the document: set by one conditional UPDATE when a worker claims it, checked by every
    # later write of that run, so a redelivered or stale task can neither run twice nor overwrite a newer run.
    claim_token = models.CharField(max_length=32, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # The latest queueing of the document: stamped by every enqueue and carried by the task it sent. A task whose
    # retries run out fails only the documents still on its own queueing, so a re-index queued while an older task
    # waited to retry is run by its own task, not failed by the older one's give-up. Blank before it was recorded.
    queue_token = models.CharField(max_length=32, blank=True, default="", db_default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    parsing_started_at = models.DateTimeField(null=True, blank=True)
    chunking_started_at = models.DateTimeField(null=True, blank=True)
    embedding_started_at = models.DateTimeField(null=True, blank=True)
    indexing_started_at = models.DateTimeField(null=True, blank=True)
    indexed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["knowledge_base", "external_id"],
                condition=models.Q(external_id__isnull=False),
                name="document_unique_external_id_per_kb",
            )
        ]
        indexes = [
            models.Index(fields=["tenant", "knowledge_base", "status"]),
            models.Index(fields=["status", "lease_expires_at"], name="document_status_lease"),
            # The document list's order (selectors.document_list): a page is read off the index, not sorted from
            # every document of the knowledge base.
            models.Index(fields=["tenant", "knowledge_base", "-created_at", "-id"], name="document_kb_newest_first"),
        ]

    def __str__(self) -> str:
        return self.title


class Chunk(TenantOwnedModel):
    """A passage of a document: the source of truth from which the Milvus index can always be rebuilt."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="chunks")
    position = models.PositiveIntegerField()
    text = models.TextField()
    token_count = models.PositiveIntegerField(default=0)
    content_hash = models.CharField(max_length=64)
    # The hash of what the model reads of `text` when that differs from it (a long run broken by spaces, Traditional
    # characters as Simplified: `embeddings.model_input`), blank when the model reads the text as stored. The
    # embedding cache keys vectors by what the model reads, so its purge keeps an entry a chunk's `content_hash` or
    # `model_input_hash` names.
    model_input_hash = models.CharField(max_length=64, blank=True, default="", db_default="")
    external_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    # A disabled chunk has no vector in Milvus and is never a search hit nor a stored answer's source; a re-run of its
    # document that keeps its text keeps it disabled.
    enabled = models.BooleanField(default=True, db_default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["document_id", "position"]
        constraints = [models.UniqueConstraint(fields=["document", "position"], name="chunk_unique_position")]
        indexes = [
            models.Index(fields=["tenant", "knowledge_base"]),
            # The embedding cache's purge asks, per entry, whether any chunk of the tenant still has the text.
            models.Index(fields=["tenant", "content_hash"], name="chunk_tenant_content_hash"),
            models.Index(
                fields=["tenant", "model_input_hash"],
                name="chunk_tenant_model_input_hash",
                condition=~models.Q(model_input_hash=""),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.position}"


class EmbeddingCacheEntry(TenantOwnedModel):
    """A vector for (tenant, model, hash of what the model read): re-indexing unchanged text never re-embeds it. The
    hash is of the model's input (`embeddings.model_input` of the text), not of the stored text, so a vector is
    never served for an input it was not made from. The model is named by its identity (`embeddings.model_identity()`:
    its name and a digest of its files), so a model changed in place, or another one in a directory of the same name,
    is never served this model's vectors.

    Per tenant, although the vector is a function of the text alone: a cache shared across tenants would let one
    tenant learn, from how fast its upload is indexed, that another tenant holds the very same text, and would keep
    vectors derived from a tenant's text after the tenant deleted it. Entries go with their tenant (cascade) and,
    once no chunk of the tenant has that text any more, with the hourly `embedding_cache_purge` task. It lives in
    the database (not Redis) because it must survive Redis loss: a rebuild after a Redis flush would otherwise
    re-embed everything."""

    model_name = models.CharField(max_length=200)  # the model's identity, "name@digest"
    text_hash = models.CharField(max_length=64)
    vector = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "model_name", "text_hash"], name="embedding_cache_unique_tenant_model_text"
            )
        ]

    def __str__(self) -> str:
        return f"{self.model_name}:{self.text_hash[:12]}"


class IngestQueueMarker(models.Model):
    """The platform's one marker of how far the workers have read the ingestion queue: `sent_at` is when the stalled
    sweep last sent a marker task into the queue, `seen_at_sent` the send time of the newest marker a worker has
    taken off it. The queue hands out its messages in order, so once a marker sent at T was taken, every indexing
    message sent before T has been taken too: a document still queued since before T lost its message, and only such
    a document is worth queueing again. Not tenant data (it names no tenant); one row, pk 1."""

    sent_at = models.DateTimeField(null=True, blank=True)
    seen_at_sent = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"queue marker sent {self.sent_at}, seen up to {self.seen_at_sent}"
