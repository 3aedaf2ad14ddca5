"""Chunk text is stored and shown exactly as the document has it; only the model reads long runs broken.

A run the model would read as one [UNK] (a hex blob, Hangul without spaces) is broken by spaces in what the model
reads, never in what is stored: a user copying a hash from a source gets the hash. The uploads go through the API;
the indexing run is called directly (no worker) against a `milvus-lite server`."""

from __future__ import annotations

import hashlib
import re
import textwrap
from datetime import timedelta
from io import StringIO

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.utils import timezone

from kbplatform.text import width_folded
from retrieval import embeddings, services, vectorstore
from retrieval.chunking import text_hash
from retrieval.embedding_cache import PURGE_GRACE, embedding_cache_purge, embeddings_cached
from retrieval.models import Chunk, Document, DocumentStatus, EmbeddingCacheEntry, KnowledgeBase, ReindexStatus
from retrieval.parsing import document_parse
from tests.retrieval.factories import kb_make

pytestmark = pytest.mark.django_db

HEX_RUN = hashlib.sha512(b"release-2026-11").hexdigest() + hashlib.sha512(b"tail").hexdigest()[:122]
HANGUL_RUN = "한국어텍스트처리기능설명서" * 4
DOCUMENT = (
    "Release notes for the storage gateway.\n\n"
    "The gateway now verifies every archive it restores against the digest published with the release.\n\n"
    f"Checksum of the release archive: {HEX_RUN}\n\n"
    f"사용자 안내: {HANGUL_RUN}\n\n"
    "Older archives keep the digest they were published with; nothing has to be downloaded again.\n"
)


def _indexed_upload(api_client, kb, name: str, data: bytes) -> Document:
    response = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/documents/",
        {"file": SimpleUploadedFile(name, data, content_type="text/plain")},
        format="multipart",
    )
    assert response.status_code == 202, response.json()
    run = services.documents_index(tenant_id=kb.tenant_id, document_ids=[response.json()["id"]])
    document = Document.objects.for_tenant(kb.tenant).get(pk=response.json()["id"])
    assert document.status == DocumentStatus.INDEXED, (run.failed, document.error_message)
    return document


def _search(api_client, kb, query: str) -> list[dict]:
    response = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/search/", {"query": query, "group_by_document": False}, format="json"
    )
    assert response.status_code == 200, response.json()
    return response.json()["results"]


def test_an_uploaded_documents_chunks_are_slices_of_its_text_and_its_hex_run_is_found(
    milvus_server, api_client, tenant
):
    assert len(HEX_RUN) == 250 and len(HANGUL_RUN) == 52
    kb = kb_make(tenant, name="as-written", chunk_max_tokens=200, chunk_overlap_tokens=0)
    document = _indexed_upload(api_client, kb, "notes.txt", DOCUMENT.encode())
    parsed = document_parse(DOCUMENT.encode(), filename="notes.txt", max_bytes=10**6).text
    chunks = list(Chunk.objects.for_tenant(tenant).filter(document=document).order_by("position"))

    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.text in parsed, chunk.text  # no space added anywhere
        assert chunk.content_hash == text_hash(chunk.text)
        assert chunk.token_count == embeddings.token_count(chunk.text) <= 200
    (hex_chunk,) = [chunk for chunk in chunks if HEX_RUN in chunk.text]
    assert [chunk for chunk in chunks if HANGUL_RUN in chunk.text]
    assert all(embeddings.long_runs_break(chunk.text) != chunk.text for chunk in chunks if HANGUL_RUN in chunk.text)

    hits = _search(api_client, kb, HEX_RUN)
    assert hits[0]["chunk_id"] == hex_chunk.pk
    assert HEX_RUN in hits[0]["text"]  # shown as written: a user copying the checksum gets the checksum


def test_a_client_chunk_is_stored_byte_for_byte_as_sent(milvus_server, api_client, tenant):
    kb = kb_make(tenant, name="as-sent")
    sent = [f"  Token:\t{HEX_RUN}  \n", f"{HANGUL_RUN} 끝.", "Plain prose stays as it is."]
    response = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/documents/",
        {"title": "client chunks", "chunks": [{"text": text, "external_id": f"c{i}"} for i, text in enumerate(sent)]},
        format="json",
    )
    assert response.status_code == 202, response.json()
    services.documents_index(tenant_id=tenant.pk, document_ids=[response.json()["id"]])

    stored = Chunk.objects.for_tenant(tenant).filter(document_id=response.json()["id"]).order_by("position")
    assert [chunk.text for chunk in stored] == sent
    assert [chunk.content_hash for chunk in stored] == [text_hash(text) for text in sent]
    hits = _search(api_client, kb, HEX_RUN)
    assert hits[0]["external_id"] == "c0" and hits[0]["text"] == sent[0]


def test_the_cache_serves_a_vector_only_for_what_the_model_reads(tenant):
    model = "test-model@0123456789abcdef"
    broken = embeddings.long_runs_break(HEX_RUN)
    assert broken != HEX_RUN
    # An entry keyed by the text as written, made when the model read it whole (one [UNK]): never served.
    unread = embeddings.embedding_model().encode([HEX_RUN], normalize_embeddings=True)[0].astype(np.float32)
    EmbeddingCacheEntry.objects.create(
        tenant=tenant, model_name=model, text_hash=text_hash(HEX_RUN), vector=unread.tobytes()
    )
    (vector,), encoded = embeddings_cached(tenant_id=tenant.pk, texts=[HEX_RUN], model_identity=model)
    assert encoded == 1
    np.testing.assert_allclose(vector, embeddings.embed_texts([broken])[0], atol=1e-5)
    # The model reads the text as written and as the last release stored it (broken) alike: one entry serves both.
    (again,), encoded = embeddings_cached(tenant_id=tenant.pk, texts=[broken], model_identity=model)
    assert encoded == 0
    np.testing.assert_array_equal(again, vector)


def test_purge_keeps_the_entry_a_chunk_with_a_long_run_is_embedded_from(milvus_server, api_client, tenant):
    kb = kb_make(tenant, name="purge-runs", chunk_max_tokens=200)
    document = _indexed_upload(api_client, kb, "notes.txt", DOCUMENT.encode())
    entries = EmbeddingCacheEntry.objects.for_tenant(tenant)
    kept = set(entries.values_list("text_hash", flat=True))
    assert len(kept) == Chunk.objects.for_tenant(tenant).filter(document=document).count()
    EmbeddingCacheEntry.objects.create(
        tenant=tenant,
        model_name="old",
        text_hash=text_hash("no chunk has this"),
        vector=np.ones(4, np.float32).tobytes(),
    )
    entries.update(created_at=timezone.now() - PURGE_GRACE - timedelta(minutes=1))

    embedding_cache_purge()

    assert set(entries.values_list("text_hash", flat=True)) == kept


def test_chunks_the_last_release_stored_broken_are_replaced_by_the_text_as_written_without_encoding(
    milvus_server, api_client, tenant
):
    kb = kb_make(tenant, name="upgrade", chunk_max_tokens=200)
    document = _indexed_upload(api_client, kb, "notes.txt", DOCUMENT.encode())
    rows = Chunk.objects.for_tenant(tenant).filter(document=document)
    written = list(rows.order_by("position").values_list("text", flat=True))
    # As the last release stored them: the broken text, hashed as stored, and its cache entries keyed by that hash.
    EmbeddingCacheEntry.objects.for_tenant(tenant).delete()
    for chunk in rows:
        broken = embeddings.long_runs_break(chunk.text)
        rows.filter(pk=chunk.pk).update(text=broken, content_hash=text_hash(broken), model_input_hash="")
        EmbeddingCacheEntry.objects.create(
            tenant=tenant,
            model_name=embeddings.model_identity(),
            text_hash=text_hash(broken),
            vector=embeddings.embed_texts([broken])[0].tobytes(),
        )
    assert list(rows.order_by("position").values_list("text", flat=True)) != written

    services.document_reindex(tenant=tenant, document=document)
    run = services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])

    assert run.encoded == 0  # the model reads the same input as before: every vector comes from the cache
    assert list(rows.order_by("position").values_list("text", flat=True)) == written
    assert rows.exclude(model_input_hash="").count() == 2  # the hex run's chunk and the Hangul run's
    hits = _search(api_client, kb, HEX_RUN)
    assert HEX_RUN in hits[0]["text"]


def test_a_reindex_onto_a_model_that_breaks_runs_otherwise_records_what_the_new_model_reads(
    milvus_server, api_client, tenant, monkeypatch
):
    """`model_input_hash` names what the model reads, and the purge keeps the cache entries it names: after a re-index
    onto a model whose tokenizer breaks a run elsewhere (another word-length limit, or no lower-casing of Hangul), it
    must name the new model's input, or the purge drops the vectors the re-index just cached (and the next rebuild
    encodes them again) while the chunk keeps naming an input no model reads any more."""
    kb = kb_make(tenant, name="new-tokenizer", chunk_max_tokens=200)
    document = _indexed_upload(api_client, kb, "notes.txt", DOCUMENT.encode())
    (hex_chunk,) = Chunk.objects.for_tenant(tenant).filter(document=document, text__contains=HEX_RUN)
    assert hex_chunk.model_input_hash == text_hash(embeddings.long_runs_break(hex_chunk.text))

    def breaks_every_40(text: str, model: str | None = None) -> str:
        return re.sub(r"\S{41,}", lambda run: " ".join(textwrap.wrap(run.group(), 40)), text)

    new_model = embeddings.identity_name(embeddings.model_identity()) + "@fedcba9876543210"
    monkeypatch.setattr(embeddings, "long_runs_break", breaks_every_40)
    monkeypatch.setattr(embeddings, "model_identity", lambda model=None: new_model)
    assert breaks_every_40(hex_chunk.text) != hex_chunk.text
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).update(reindex_status=ReindexStatus.RUNNING)
    assert services.knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=kb.pk)

    hex_chunk.refresh_from_db()
    new_input = text_hash(breaks_every_40(hex_chunk.text))
    assert hex_chunk.model_input_hash == new_input
    entries = EmbeddingCacheEntry.objects.for_tenant(tenant)
    entries.update(created_at=timezone.now() - PURGE_GRACE - timedelta(minutes=1))
    embedding_cache_purge()
    assert entries.filter(model_name=new_model, text_hash=new_input).exists()
    # Every chunk's vector of the new model survives the purge, found by the hash the chunk records.
    for content_hash, input_hash in Chunk.objects.for_tenant(tenant).values_list("content_hash", "model_input_hash"):
        assert entries.filter(model_name=new_model, text_hash=input_hash or content_hash).exists()


# A help-centre page written in Traditional characters (Taiwan, Hong Kong), and as OpenCC spells it in Simplified ones
# (帳戶 as 帐户, a variant mainland text also writes).
TRADITIONAL_PAGE = "退款審核通過後，款項會在五個工作天內退回原付款帳戶。發票會在訂單完成後寄到您的電子信箱。"
SIMPLIFIED_PAGE = "退款审核通过后，款项会在五个工作天内退回原付款帐户。发票会在订单完成后寄到您的电子信箱。"


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("怎麼修改密碼？", "怎么修改密码？"),
        ("怎么修改密码？", "怎么修改密码？"),
        ("How do I reset my password?", "How do I reset my password?"),
        # Japanese keeps its kanji: 電話 and 説明 are Japanese spellings, not Traditional Chinese to convert.
        ("電話番号の変更方法を説明してください", "電話番号の変更方法を説明してください"),
    ],
)
def test_the_multilingual_model_reads_chinese_in_simplified_characters(text, read):
    assert embeddings.model_input(text, embeddings.USE_MODEL_NAME) == read
    # The bundled model reads Chinese characters as unknown pieces in either script: it reads the text as written.
    assert embeddings.model_input(text, "all-MiniLM-L6-v2") == text


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("How do I reset my ＡＰＩ key？", "How do I reset my API key？"),  # "？" is in its vocabulary
        ("Ｒｅｆｕｎｄ for order １２３４５６", "Refund for order 123456"),
        ("怎么重置ＡＰＩ密钥？", "怎么重置API密钥？"),
        ("How do I reset my API key?", "How do I reset my API key?"),
    ],
)
def test_the_bundled_model_reads_full_width_forms_as_ascii(text, read):
    assert embeddings.model_input(text, "all-MiniLM-L6-v2") == read
    assert embeddings.characters_read(text, "all-MiniLM-L6-v2") == read  # one character for one
    # The multilingual model's tokenizer reads them so itself: its input is the text as written.
    assert embeddings.model_input(text, embeddings.USE_MODEL_NAME) == text


def test_a_question_typed_in_full_width_has_the_vector_of_its_ascii_spelling_and_is_readable():
    full_width, ascii_, other = embeddings.embed_texts(
        [
            "ｈｏｗ\u3000ｄｏ\u3000Ｉ\u3000ｒｅｓｅｔ\u3000ｍｙ\u3000ｐａｓｓｗｏｒｄ？",
            "how do I reset my password？",
            "How do I get a refund?",
        ],
        model="all-MiniLM-L6-v2",
    )
    assert float(full_width @ ascii_) > 0.9999
    assert float(full_width @ other) < 0.9
    assert embeddings.text_readable("ｈｏｗ ｄｏ Ｉ ｒｅｓｅｔ ｍｙ ｐａｓｓｗｏｒｄ？", "all-MiniLM-L6-v2")


FULL_WIDTH_PAGE = "Ｔｏ rotate an ＡＰＩ key, open Settings and choose Keys. Old keys stop working after ２４ hours."


def test_a_page_with_full_width_letters_is_stored_as_written_and_embedded_and_searched_as_ascii(
    milvus_server, api_client, tenant
):
    kb = kb_make(tenant, name="full-width")
    document = _indexed_upload(api_client, kb, "keys.txt", FULL_WIDTH_PAGE.encode())

    (chunk,) = Chunk.objects.for_tenant(tenant).filter(document=document)
    assert chunk.text == FULL_WIDTH_PAGE  # shown as the document has it
    read = width_folded(FULL_WIDTH_PAGE)
    assert chunk.model_input_hash == text_hash(read)
    assert chunk.token_count == embeddings.token_count(read)
    # Its words are found from an ASCII query and a full-width one alike, by BM25 alone.
    for query in ("API key 24 hours", "ＡＰＩ key"):
        response = api_client.post(
            f"/api/v1/knowledge-bases/{kb.pk}/search/", {"query": query, "retrieval_mode": "full_text"}, format="json"
        )
        assert response.status_code == 200, response.json()
        assert [hit["chunk_id"] for hit in response.json()["results"]] == [chunk.pk], query
        assert response.json()["results"][0]["text"] == FULL_WIDTH_PAGE


def test_a_question_in_traditional_characters_has_the_vector_of_its_simplified_spelling():
    traditional, simplified, other = embeddings.embed_texts(
        ["發票在哪裡下載？", "发票在哪里下载？", "退款多久能到账？"], model=embeddings.USE_MODEL_NAME
    )
    assert float(traditional @ simplified) > 0.9999
    assert float(traditional @ other) < 0.9


def test_a_traditional_page_is_stored_as_written_and_embedded_as_the_multilingual_model_reads_it(
    milvus_server, api_client, tenant
):
    kb = kb_make(tenant, name="traditional", embedding_model=embeddings.USE_MODEL_NAME, text_analyzer="chinese")
    document = _indexed_upload(api_client, kb, "refunds.txt", TRADITIONAL_PAGE.encode())

    (chunk,) = Chunk.objects.for_tenant(tenant).filter(document=document)
    assert chunk.text == TRADITIONAL_PAGE  # shown as the document has it
    assert chunk.model_input_hash == text_hash(SIMPLIFIED_PAGE)
    model = embeddings.model_identity(embeddings.USE_MODEL_NAME)
    entries = EmbeddingCacheEntry.objects.for_tenant(tenant).filter(model_name=model)
    assert list(entries.values_list("text_hash", flat=True)) == [text_hash(SIMPLIFIED_PAGE)]
    entries.update(created_at=timezone.now() - PURGE_GRACE - timedelta(minutes=1))
    embedding_cache_purge()
    assert entries.count() == 1  # the chunk names what the model read: its vector is kept
    # Found by meaning from a question in either script alike.
    for query in ("退款几天能退回原来的账户？", "退款幾天能退回原來的帳戶？"):
        response = api_client.post(
            f"/api/v1/knowledge-bases/{kb.pk}/search/",
            {"query": query, "retrieval_mode": "semantic"},
            format="json",
        )
        assert response.status_code == 200, response.json()
        (hit,) = response.json()["results"]
        assert hit["text"] == TRADITIONAL_PAGE
        assert hit["similarity"] == pytest.approx(
            float(
                embeddings.embed_query(query, embeddings.USE_MODEL_NAME)
                @ embeddings.embed_query(SIMPLIFIED_PAGE, embeddings.USE_MODEL_NAME)
            ),
            abs=1e-4,
        )


def test_a_traditional_page_indexed_by_the_last_release_is_embedded_afresh_by_a_reindex(
    milvus_server, api_client, tenant
):
    """The last release embedded a Traditional chunk as written and recorded no model input of its own; a re-index
    (of the document or of the knowledge base) embeds what the model reads now and records it, so the purge keeps the
    new vector."""
    kb = kb_make(tenant, name="upgrade-traditional", embedding_model=embeddings.USE_MODEL_NAME, text_analyzer="chinese")
    document = _indexed_upload(api_client, kb, "refunds.txt", TRADITIONAL_PAGE.encode())
    rows = Chunk.objects.for_tenant(tenant).filter(document=document)
    model = embeddings.model_identity(embeddings.USE_MODEL_NAME)
    # As the last release left them: no model input recorded, the vector of the text as written cached by its hash.
    rows.update(model_input_hash="")
    EmbeddingCacheEntry.objects.for_tenant(tenant).update(text_hash=text_hash(TRADITIONAL_PAGE))

    services.document_reindex(tenant=tenant, document=document)
    run = services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])

    assert run.encoded == 1
    assert rows.get().model_input_hash == text_hash(SIMPLIFIED_PAGE)
    assert (
        EmbeddingCacheEntry.objects.for_tenant(tenant)
        .filter(model_name=model, text_hash=text_hash(SIMPLIFIED_PAGE))
        .exists()
    )


def _as_the_last_release_indexed(tenant, chunk: Chunk, *, model: str, analyzer: str) -> None:
    """`chunk` as the release before its reading changed left it: no model input recorded, its vector (cached by its
    text's hash) made from the text as written, its BM25 field holding the text as written."""
    Chunk.objects.for_tenant(tenant).filter(pk=chunk.pk).update(model_input_hash="")
    read_now = embeddings.model_input(chunk.text, model)
    vector = embeddings.embed_texts([chunk.text], model=model)[0]  # stands in for the vector of the text as written
    EmbeddingCacheEntry.objects.for_tenant(tenant).filter(text_hash=text_hash(read_now)).update(
        text_hash=text_hash(chunk.text)
    )
    with pytest.MonkeyPatch.context() as last_release:
        last_release.setattr(vectorstore, "bm25_document_text", lambda text, analyzer: text)
        vectorstore.vectors_upsert(
            rows=[
                vectorstore.ChunkVector(
                    chunk_id=chunk.pk,
                    tenant_id=tenant.pk,
                    knowledge_base_id=chunk.knowledge_base_id,
                    document_id=chunk.document_id,
                    vector=vector,
                    text=chunk.text,
                    analyzer=analyzer,
                )
            ],
            dimension=embeddings.embedding_dimension(model),
        )


def _full_text_hits(api_client, kb, query: str) -> list[int]:
    response = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/search/", {"query": query, "retrieval_mode": "full_text"}, format="json"
    )
    assert response.status_code == 200, response.json()
    return [hit["chunk_id"] for hit in response.json()["results"]]


@pytest.mark.parametrize("command", ["text_reading_reindex", "traditional_chinese_reindex"])
def test_the_upgrade_command_reindexes_the_knowledge_bases_read_otherwise_and_keeps_their_chunks(
    milvus_server, api_client, tenant, command
):
    """`manage.py text_reading_reindex` (and its former name): after the upgrade, the knowledge bases the last release
    indexed with text it now reads otherwise (Traditional characters on the multilingual model and the chinese
    analyser, full-width letters on the bundled model and an English BM25 field) are found and re-indexed; the re-index
    keeps their chunk ids, records what the model reads now and rewrites their BM25 text, so a Simplified keyword and
    an ASCII one find them. Knowledge bases whose text reads as it did are left."""
    traditional = kb_make(tenant, name="taipei", embedding_model=embeddings.USE_MODEL_NAME, text_analyzer="chinese")
    simplified = kb_make(tenant, name="beijing", embedding_model=embeddings.USE_MODEL_NAME, text_analyzer="chinese")
    english = kb_make(tenant, name="london")
    full_width = kb_make(tenant, name="seoul")
    document = _indexed_upload(api_client, traditional, "refunds.txt", TRADITIONAL_PAGE.encode())
    _indexed_upload(api_client, simplified, "refunds.txt", SIMPLIFIED_PAGE.encode())
    _indexed_upload(
        api_client, english, "notes.txt", f"Refunds reach your account within five days. {HEX_RUN}".encode()
    )
    keys = _indexed_upload(api_client, full_width, "keys.txt", FULL_WIDTH_PAGE.encode())
    (chunk,) = Chunk.objects.for_tenant(tenant).filter(document=document)
    (keys_chunk,) = Chunk.objects.for_tenant(tenant).filter(document=keys)
    _as_the_last_release_indexed(tenant, chunk, model=embeddings.USE_MODEL_NAME, analyzer="chinese")
    _as_the_last_release_indexed(tenant, keys_chunk, model="all-MiniLM-L6-v2", analyzer="english")
    assert _full_text_hits(api_client, traditional, "发票") == []  # 發票 as written: not found by the keyword yet
    assert _full_text_hits(api_client, full_width, "API") == []  # ＡＰＩ as written

    listed = StringIO()
    call_command(command, "--list", stdout=listed)
    assert listed.getvalue().splitlines() == [
        f"{tenant.slug}/{traditional.pk} 'taipei': 1 chunks read otherwise since they were indexed",
        f"{tenant.slug}/{full_width.pk} 'seoul': 1 chunks read otherwise since they were indexed",
    ]
    assert KnowledgeBase.objects.for_tenant(tenant).get(pk=traditional.pk).reindex_status != ReindexStatus.RUNNING

    call_command(command, stdout=StringIO())
    statuses = dict(KnowledgeBase.objects.for_tenant(tenant).values_list("name", "reindex_status"))
    assert statuses["taipei"] == ReindexStatus.RUNNING and statuses["seoul"] == ReindexStatus.RUNNING
    assert statuses["beijing"] != ReindexStatus.RUNNING and statuses["london"] != ReindexStatus.RUNNING
    assert services.knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=traditional.pk) == 1
    assert services.knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=full_width.pk) == 1

    again = Chunk.objects.for_tenant(tenant).get(document=document)
    assert again.pk == chunk.pk and again.model_input_hash == text_hash(SIMPLIFIED_PAGE)
    assert _full_text_hits(api_client, traditional, "发票") == [chunk.pk]
    keys_again = Chunk.objects.for_tenant(tenant).get(document=keys)
    assert keys_again.pk == keys_chunk.pk and keys_again.model_input_hash == text_hash(width_folded(FULL_WIDTH_PAGE))
    assert _full_text_hits(api_client, full_width, "API") == [keys_chunk.pk]


def test_the_upgrade_command_names_a_tenant_it_does_not_know(tenant):
    with pytest.raises(CommandError, match="No tenant with slug 'nobody'"):
        call_command("text_reading_reindex", "--tenant", "nobody", stdout=StringIO())
    quiet = StringIO()
    call_command("text_reading_reindex", "--tenant", tenant.slug, stdout=quiet)
    assert quiet.getvalue() == "No knowledge base holds text this release reads otherwise: nothing to re-index.\n"


def test_the_upgrade_command_says_which_knowledge_base_it_could_not_queue_and_queues_the_rest(
    milvus_server, api_client, tenant
):
    """A knowledge base already re-indexing is not queued twice: the command says so in its line and goes on."""
    busy = kb_make(tenant, name="busy")
    waiting = kb_make(tenant, name="waiting")
    documents = [_indexed_upload(api_client, kb, "keys.txt", FULL_WIDTH_PAGE.encode()) for kb in (busy, waiting)]
    for chunk in Chunk.objects.for_tenant(tenant).filter(document__in=documents):
        _as_the_last_release_indexed(tenant, chunk, model="all-MiniLM-L6-v2", analyzer="english")
    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=busy)

    out = StringIO()
    call_command("text_reading_reindex", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"{tenant.slug}/{busy.pk} 'busy': 1 chunks read otherwise since they were indexed"
    assert lines[1].startswith(f"{tenant.slug}/{busy.pk} 'busy': not queued: ")
    assert lines[2:] == [
        f"{tenant.slug}/{waiting.pk} 'waiting': 1 chunks read otherwise since they were indexed",
        f"{tenant.slug}/{waiting.pk} 'waiting': re-index queued",
    ]
    assert KnowledgeBase.objects.for_tenant(tenant).get(pk=waiting.pk).reindex_status == ReindexStatus.RUNNING
