"""Django admin of ingestion: knowledge bases, documents (upload, status, progress, retry, re-index) and chunks
(read-only). Every list and form is scoped to the tenants the user holds a role in (TenantScopedAdmin); writes
go through the same services as the API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from kbplatform.errors import ApplicationError
from retrieval import embeddings, selectors, services
from retrieval.models import Chunk, Document, DocumentStatus, KnowledgeBase, TextAnalyzer
from tenants.admin_scoping import ServiceDeletionAdmin, TenantScopedAdmin

if TYPE_CHECKING:
    from django.contrib.admin.models import LogEntry


def progress_bar(value: float, label: str) -> str:
    return format_html(
        '<progress value="{}" max="1" style="width:8em"></progress> <span>{}% {}</span>',
        f"{value:.3f}",
        round(value * 100),
        label,
    )


SEARCH_INDEX_LABELS = {
    selectors.IndexStatus.CURRENT: "current",
    selectors.IndexStatus.REINDEXING: "re-indexing onto this model",
    selectors.IndexStatus.REINDEX_FAILED: "re-index to this model failed part way: searches refused until run again",
    selectors.IndexStatus.OTHER_MODEL: "another model's vectors: searches refused until re-indexed",
}


class AwaitingReindexFilter(admin.SimpleListFilter):
    """Knowledge bases whose searches are refused until they are re-indexed onto the web's model."""

    title = "search index"
    parameter_name = "search_index"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("awaiting_reindex", "Awaiting a re-index (another model's vectors)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() != "awaiting_reindex":
            return queryset
        try:
            return selectors.knowledge_bases_awaiting_reindex_onto_their_models(knowledge_bases=queryset)
        except embeddings.EmbeddingModelUnavailable as exc:
            messages.error(
                request,
                f"An embedding model cannot be read, so which knowledge bases await a re-index is unknown: {exc}",
            )
            return queryset.none()


class KnowledgeBaseForm(forms.ModelForm):
    """The knowledge base's settings; a retrieval mode that needs the chunks' text is refused, with what to do, on a
    knowledge base whose text is not in the search index yet (as the API refuses it)."""

    class Meta:
        model = KnowledgeBase
        fields = "__all__"  # noqa: DJ007 - the admin's fieldsets and read-only fields choose what is shown

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "embedding_model" in self.fields:  # a new knowledge base: chosen from the models the deployment offers
            self.fields["embedding_model"] = forms.ChoiceField(
                choices=[(name, name) for name in embeddings.offered_models()],
                initial=embeddings.default_model(),
                help_text="Changed later by the re-index action onto another model (this knowledge base alone).",
            )

    def clean(self) -> dict:
        cleaned = super().clean()
        if not self.instance.pk and cleaned.get("embedding_model"):
            self.instance.embedding_dimension = embeddings.embedding_dimension(cleaned["embedding_model"])
        mode = cleaned.get("retrieval_mode")
        if self.instance.pk and mode and mode != self.instance.retrieval_mode:
            try:
                selectors.retrieval_mode_resolve(knowledge_base=self.instance, requested=mode)
            except selectors.FullTextUnavailableError as exc:
                self.add_error("retrieval_mode", str(exc))
        return cleaned


class TextAnalyzerChoiceForm(forms.Form):
    """The analyser the re-index action moves knowledge bases' BM25 text to."""

    text_analyzer = forms.ChoiceField(
        choices=TextAnalyzer.choices,
        label="BM25 text as",
        help_text="A language's analyser reads its words as stems, its function words left out (docs/ingestion.md).",
    )


class KnowledgeBaseAdminBase(ServiceDeletionAdmin):
    """The knowledge bases' admin but for deleting one, which reaches conversations: `lifecycle.admin` registers
    it with `deletion_summary` and `delete_one`."""

    form = KnowledgeBaseForm
    list_display = (
        "name",
        "tenant",
        "embedding_model",
        "retrieval_mode",
        "text_analyzer",
        "text_index",
        "search_index",
        "chunk_max_tokens",
        "chunk_overlap_tokens",
        "reindex",
    )
    list_filter = (AwaitingReindexFilter,)
    search_fields = ("name",)
    readonly_fields = (
        "embedding_model_identity",
        "search_index",
        "embedding_dimension",
        "reindex_status",
        "reindex_progress",
        "reindex_error",
        "reindex_started_at",
        "reindex_finished_at",
        "reindex_lease_expires_at",
        "reindex_attempts",
        "reindex_from_model_identity",
        "text_index",
        "text_index_progress",
        "text_index_error",
        "text_index_lease_expires_at",
        "text_index_attempts",
    )
    exclude = ("reindex_claim_token",)  # which run holds the re-index: the workers' business, not the operator's
    actions = ("reindex_knowledge_bases",)

    def get_readonly_fields(self, request: HttpRequest, obj: KnowledgeBase | None = None) -> tuple[str, ...]:
        # The analyser made the terms of the chunks already indexed, and the model their vectors: each is chosen when
        # the knowledge base is made, and changed after only by a re-index (the actions), which rewrites them.
        fields = tuple(super().get_readonly_fields(request, obj))
        return (*fields, "text_analyzer", "embedding_model") if obj is not None else fields

    def get_actions(self, request: HttpRequest) -> dict:
        """The re-index action, one per offered model that moves the selected knowledge bases onto it, and one that
        moves their BM25 text to an analyser chosen on the next page."""
        actions = super().get_actions(request)
        if "reindex_knowledge_bases" not in actions:
            return actions
        for model in embeddings.offered_models():

            def move(
                admin_: KnowledgeBaseAdminBase, request: HttpRequest, queryset: QuerySet, model: str = model
            ) -> None:
                admin_.reindex_onto(request, queryset, model=model)

            name = f"reindex_onto_{model}"
            actions[name] = (move, name, f"Re-index selected knowledge bases onto {model}")
        actions["reindex_text_as"] = (
            KnowledgeBaseAdminBase.reindex_text_as,
            "reindex_text_as",
            "Re-index selected knowledge bases' BM25 text as …",
        )
        return actions

    def reindex_text_as(self, request: HttpRequest, queryset: QuerySet) -> TemplateResponse | None:
        """Ask which analyser the selected knowledge bases' BM25 text moves to (one choice of many languages, on a page
        of its own), then start their re-index as `reindex_onto` does. Back to the list when done."""
        form = TextAnalyzerChoiceForm(request.POST if "apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            self.reindex_onto(request, queryset, model=None, text_analyzer=form.cleaned_data["text_analyzer"])
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Re-index BM25 text",
            "opts": self.model._meta,
            "knowledge_bases": queryset,
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/retrieval/knowledgebase/reindex_text.html", context)

    def reindex_onto(
        self, request: HttpRequest, queryset: QuerySet, *, model: str | None, text_analyzer: str | None = None
    ) -> None:
        """Start the re-index of each selected knowledge base the user may change (onto `model`, its BM25 text read by
        `text_analyzer`, when given)."""
        started = 0
        for knowledge_base in queryset:
            if not self.has_change_permission(request, knowledge_base):
                continue
            try:
                services.knowledge_base_reindex_start(
                    tenant=knowledge_base.tenant,
                    knowledge_base=knowledge_base,
                    embedding_model=model,
                    text_analyzer=text_analyzer,
                )
                started += 1
            except ApplicationError as exc:
                self.message_user(request, f"{knowledge_base}: {exc.message}", level=messages.WARNING)
        onto = f" onto {model}" if model else f", BM25 text as {text_analyzer}" if text_analyzer else ""
        self.message_user(request, f"Re-indexing {started} knowledge base(s){onto}.")

    @admin.display(description="search index")
    def search_index(self, obj: KnowledgeBase) -> str:
        """How the knowledge base's vectors stand against the model it is searched with."""
        try:
            identity = embeddings.model_identity(embeddings.knowledge_base_model(obj.embedding_model))
        except (
            embeddings.EmbeddingModelUnavailable
        ) as exc:  # the page stays up and says what the operator must fix first
            return format_html('<strong style="color:#ba2121">embedding model cannot be read</strong> ({})', exc)
        state = selectors.index_state(knowledge_base=obj, query_model_identity=identity)
        label = SEARCH_INDEX_LABELS[state.status]
        if state.status == selectors.IndexStatus.OTHER_MODEL:
            if not getattr(obj, "holds_chunks", True):
                # Not refused (no vector to rank), and its first document moves it onto the workers' model: neither
                # the filter nor /api/health/ counts it as awaiting a re-index.
                return "another model recorded, holds no chunk: its first document moves it onto the workers' model"
            return format_html('<strong style="color:#ba2121">{}</strong> ({})', label, state.knowledge_base_model)
        if state.status == selectors.IndexStatus.REINDEX_FAILED:
            if not getattr(obj, "holds_chunks", True):
                return "re-index to this model failed part way, holds no chunk: nothing to refuse"
            return format_html(
                '<strong style="color:#ba2121">{}</strong> (vectors of {} left)', label, obj.reindex_from_model_identity
            )
        return label

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        # Whether each holds a chunk, for `search_index` (a knowledge base of another model refuses searches only
        # then): one subquery of the page's query instead of a query per row.
        return (
            super()
            .get_queryset(request)
            .annotate(
                holds_chunks=Exists(
                    Chunk.objects.filter(tenant_id=OuterRef("tenant_id"), knowledge_base_id=OuterRef("pk"))
                )
            )
        )

    @admin.display(description="re-index")
    def reindex(self, obj: KnowledgeBase) -> str:
        return progress_bar(obj.reindex_progress, obj.reindex_status)

    @admin.action(description="Re-index selected knowledge bases (rebuild vectors from stored chunks)")
    def reindex_knowledge_bases(self, request: HttpRequest, queryset: QuerySet) -> None:
        self.reindex_onto(request, queryset, model=None)


class DocumentUploadForm(forms.ModelForm):
    """Upload a file (or paste text) into a knowledge base; the tenant is the knowledge base's."""

    upload = forms.FileField(required=False, help_text="PDF, DOCX, HTML, Markdown or plain text.")
    text = forms.CharField(required=False, widget=forms.Textarea, help_text="Or paste the text instead of a file.")

    class Meta:
        model = Document
        fields = ("knowledge_base", "title", "external_id")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # As over the API: a file without a title takes its file name.
        self.fields["title"].required = False
        self.fields["title"].help_text = "Leave empty to use the file's name."

    def clean(self) -> dict:
        data = super().clean()
        if bool(data.get("upload")) == bool((data.get("text") or "").strip()):
            raise forms.ValidationError("Choose a file or paste text (one of the two).")
        knowledge_base, external_id = data.get("knowledge_base"), data.get("external_id")
        if knowledge_base and external_id:
            if Document.objects.filter(knowledge_base=knowledge_base, external_id=external_id).exists():
                self.add_error("external_id", "A document with this external id is already in the knowledge base.")
        return data


@admin.register(Document)
class DocumentAdmin(ServiceDeletionAdmin):
    list_display = ("title", "tenant", "knowledge_base", "status", "progress_display", "chunk_count", "updated_at")
    list_filter = ("status", "source_kind")
    search_fields = ("title", "external_id", "source_filename")
    list_select_related = ("tenant", "knowledge_base")
    actions = ("retry_documents",)
    readonly_fields = (
        "tenant",
        "knowledge_base",
        "title",
        "external_id",
        "source_kind",
        "source_filename",
        "content_hash",
        "size_bytes",
        "status",
        "progress_display",
        "chunk_count",
        "chunks_link",
        "error_message",
        "attempts",
        "created_at",
        "parsing_started_at",
        "chunking_started_at",
        "embedding_started_at",
        "indexing_started_at",
        "indexed_at",
        "failed_at",
    )

    def get_form(self, request: HttpRequest, obj: Document | None = None, **kwargs: Any) -> type[forms.ModelForm]:
        if obj is None:
            kwargs["form"] = DocumentUploadForm
        return super().get_form(request, obj, **kwargs)

    def get_fields(self, request: HttpRequest, obj: Document | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("knowledge_base", "title", "external_id", "upload", "text")
        return self.readonly_fields

    def get_readonly_fields(self, request: HttpRequest, obj: Document | None = None) -> tuple[str, ...]:
        return () if obj is None else self.readonly_fields

    def has_change_permission(self, request: HttpRequest, obj: Document | None = None) -> bool:
        # A stored document is changed only by re-indexing; its page is read-only.
        return False if obj is not None else super().has_change_permission(request, obj)

    @admin.display(description="progress")
    def progress_display(self, obj: Document) -> str:
        return progress_bar(obj.progress, obj.status)

    @admin.display(description="chunks")
    def chunks_link(self, obj: Document) -> str:
        url = reverse("admin:retrieval_chunk_changelist") + f"?document__id__exact={obj.pk}"
        return format_html('<a href="{}">{} chunks</a>', url, obj.chunk_count)

    def save_model(self, request: HttpRequest, obj: Document, form: DocumentUploadForm, change: bool) -> None:
        knowledge_base = form.cleaned_data["knowledge_base"]
        try:
            document = services.document_create(
                tenant=knowledge_base.tenant,
                knowledge_base=knowledge_base,
                title=form.cleaned_data.get("title") or "",
                external_id=form.cleaned_data.get("external_id") or None,
                file=form.cleaned_data.get("upload") or None,
                text=(form.cleaned_data.get("text") or None) if not form.cleaned_data.get("upload") else None,
            )
        except ApplicationError as exc:
            # The form's checks passed, but the service refused (another upload took the external id meanwhile):
            # say why and show the form again, instead of a server error.
            self.message_user(request, f"Not uploaded: {exc.message}", level=messages.ERROR)
            request._kb_upload_refused = True
            return
        obj.pk = document.pk
        obj.status = document.status
        if document.status == DocumentStatus.FAILED:
            self.message_user(request, f"{document.title}: {document.error_message}", level=messages.ERROR)

    def save_related(self, request: HttpRequest, form: forms.ModelForm, formsets: list, change: bool) -> None:
        if not getattr(request, "_kb_upload_refused", False):
            super().save_related(request, form, formsets, change)

    def log_addition(self, request: HttpRequest, obj: Document, message: str | list) -> LogEntry | None:
        if not getattr(request, "_kb_upload_refused", False):
            return super().log_addition(request, obj, message)
        return None

    def response_add(self, request: HttpRequest, obj: Document, post_url_continue: str | None = None) -> HttpResponse:
        if getattr(request, "_kb_upload_refused", False):
            return HttpResponseRedirect(request.get_full_path())
        return super().response_add(request, obj, post_url_continue)

    @admin.action(description="Retry / re-index selected documents")
    def retry_documents(self, request: HttpRequest, queryset: QuerySet) -> None:
        queued = 0
        for document in queryset.select_related("tenant"):
            if not super().has_change_permission(request, document):
                continue
            try:
                services.document_reindex(tenant=document.tenant, document=document)
                queued += 1
            except ApplicationError as exc:
                self.message_user(request, f"{document}: {exc.message}", level=messages.WARNING)
        self.message_user(request, f"Queued {queued} document(s) for indexing.")

    def deletion_summary(self, obj: Document) -> tuple[str, dict[str, int]]:
        chunks = obj.chunks.count()
        stored = ", and its stored file" if obj.source_file else ""
        return f"{obj} ({obj.knowledge_base}): {chunks} chunks and their vectors{stored}", {"chunks": chunks}

    def delete_one(self, request: HttpRequest, obj: Document) -> str | None:
        try:
            services.document_delete(tenant=obj.tenant, document=obj)
        except ApplicationError as exc:
            return exc.message
        return None


@admin.register(Chunk)
class ChunkAdmin(TenantScopedAdmin):
    """Read-only but for the disable and enable actions, which go through the chunk service (Milvus with the row);
    a chunk's text is edited over the API (`PATCH /api/v1/chunks/{id}/`) or by indexing its document again."""

    list_display = ("document", "position", "token_count", "preview", "external_id", "enabled")
    list_filter = ("enabled",)
    list_select_related = ("document",)
    search_fields = ("text", "external_id")
    actions = ("chunks_disable", "chunks_enable")
    readonly_fields = (
        "tenant",
        "knowledge_base",
        "document",
        "position",
        "token_count",
        "content_hash",
        "model_input_hash",
        "external_id",
        "text",
        "enabled",
    )

    def _chunks_set_enabled(self, request: HttpRequest, queryset: QuerySet, *, enabled: bool) -> None:
        changed = 0
        for chunk in queryset.select_related("tenant"):
            if not super().has_change_permission(request, chunk):
                continue
            try:
                services.chunk_update(tenant=chunk.tenant, chunk=chunk, enabled=enabled)
                changed += 1
            except ApplicationError as exc:
                self.message_user(request, f"{chunk}: {exc.message}", level=messages.WARNING)
        self.message_user(request, f"{'Enabled' if enabled else 'Disabled'} {changed} chunk(s).")

    @admin.action(description="Disable selected chunks (left out of search)")
    def chunks_disable(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._chunks_set_enabled(request, queryset, enabled=False)

    @admin.action(description="Enable selected chunks")
    def chunks_enable(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._chunks_set_enabled(request, queryset, enabled=True)

    @admin.display(description="text")
    def preview(self, obj: Chunk) -> str:
        return obj.text[:120] + ("…" if len(obj.text) > 120 else "")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Chunk | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Chunk | None = None) -> bool:
        return False
