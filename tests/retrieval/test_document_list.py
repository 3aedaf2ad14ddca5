"""Listing a knowledge base's documents (GET /api/v1/knowledge-bases/{id}/documents/): a client follows a bulk upload
in one call (a page of documents and the knowledge base's count per status) instead of polling each id it kept.
Paged, filtered and refused like the audit log; scoped like every other knowledge-base endpoint."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from retrieval import selectors
from retrieval.models import Document, DocumentStatus
from tests.factories import DocumentFactory
from tests.retrieval.factories import kb_limited_client, kb_make

pytestmark = pytest.mark.django_db

ALL_STATUSES_ZERO = {status: 0 for status in DocumentStatus.values}


def _url(kb) -> str:
    return f"/api/v1/knowledge-bases/{kb.pk}/documents/"


def _documents(tenant, kb, statuses: list[str], *, start=None, prefix: str = "ext-") -> list[Document]:
    """Documents created one minute apart, oldest first, in the given statuses, with external ids prefix0, prefix1..."""
    start = start or timezone.now() - timedelta(days=1)
    documents = []
    for number, status in enumerate(statuses):
        document = DocumentFactory(tenant=tenant, knowledge_base=kb, status=status, external_id=f"{prefix}{number}")
        Document.objects.for_tenant(tenant).filter(pk=document.pk).update(created_at=start + timedelta(minutes=number))
        documents.append(document)
    return documents


def _ids(response) -> list[int]:
    assert response.status_code == 200, response.content[:500]
    return [document["id"] for document in response.json()["results"]]


def refused_fields(response) -> dict:
    assert response.status_code == 400, response.content[:500]
    body = response.json()
    assert set(body) == {"message", "extra"}
    return body["extra"]["fields"]


def test_lists_newest_first_with_the_body_of_the_document_endpoint(api_client, tenant):
    kb = kb_make(tenant)
    documents = _documents(tenant, kb, ["indexed", "queued", "failed"])
    response = api_client.get(_url(kb))
    assert _ids(response) == [d.pk for d in reversed(documents)]
    body = response.json()
    assert set(body) == {"count", "status_counts", "results"}
    assert body["count"] == 3
    for listed in body["results"]:
        assert listed == api_client.get(f"/api/v1/documents/{listed['id']}/").json()


def test_status_counts_cover_the_whole_knowledge_base_whatever_the_filters_or_page(api_client, tenant, other_tenant):
    kb, other_kb = kb_make(tenant), kb_make(tenant, name="other")
    _documents(tenant, kb, ["queued"] * 3 + ["indexed"] * 5 + ["failed"] * 2)
    _documents(tenant, other_kb, ["queued"] * 7)
    _documents(other_tenant, kb_make(other_tenant), ["failed"] * 4)
    expected = {**ALL_STATUSES_ZERO, "queued": 3, "indexed": 5, "failed": 2}
    for query in ("", "?limit=1", "?status=failed", "?external_id=ext-0", "?offset=50"):
        body = api_client.get(_url(kb) + query).json()
        assert body["status_counts"] == expected, query
    assert list(body["status_counts"]) == DocumentStatus.values  # in the pipeline's order, every status named


def test_an_empty_knowledge_base_counts_zero_in_every_status(api_client, tenant):
    body = api_client.get(_url(kb_make(tenant))).json()
    assert body == {"count": 0, "status_counts": ALL_STATUSES_ZERO, "results": []}


def test_pages_by_limit_and_offset(api_client, tenant):
    kb = kb_make(tenant)
    newest_first = [d.pk for d in reversed(_documents(tenant, kb, ["queued"] * 5))]
    assert _ids(api_client.get(_url(kb) + "?limit=2")) == newest_first[:2]
    assert _ids(api_client.get(_url(kb) + "?limit=2&offset=2")) == newest_first[2:4]
    assert _ids(api_client.get(_url(kb) + "?limit=2&offset=4")) == newest_first[4:]
    assert api_client.get(_url(kb) + "?limit=2&offset=4").json()["count"] == 5


def test_documents_of_the_same_instant_page_in_a_stable_order(api_client, tenant):
    """A bulk upload creates many documents within one timestamp: ordered by created_at alone, pages could repeat one
    document and skip another."""
    kb = kb_make(tenant)
    documents = [DocumentFactory(tenant=tenant, knowledge_base=kb) for _ in range(4)]
    Document.objects.for_tenant(tenant).filter(knowledge_base=kb).update(created_at=timezone.now())
    pages = [_ids(api_client.get(_url(kb) + f"?limit=1&offset={offset}")) for offset in range(4)]
    assert [page[0] for page in pages] == sorted((d.pk for d in documents), reverse=True)


def test_default_limit_is_100_and_at_most_500(api_client, tenant):
    kb = kb_make(tenant)
    DocumentFactory.create_batch(101, tenant=tenant, knowledge_base=kb)
    body = api_client.get(_url(kb)).json()
    assert body["count"] == 101 and len(body["results"]) == 100
    assert len(api_client.get(_url(kb) + "?limit=500").json()["results"]) == 101
    assert list(refused_fields(api_client.get(_url(kb) + "?limit=501"))) == ["limit"]
    assert list(refused_fields(api_client.get(_url(kb) + "?limit=0"))) == ["limit"]
    assert list(refused_fields(api_client.get(_url(kb) + "?offset=-1"))) == ["offset"]


@pytest.mark.parametrize("offset", [2**63, 10**20])
def test_an_offset_past_the_databases_range_is_400(api_client, tenant, offset):
    assert list(refused_fields(api_client.get(_url(kb_make(tenant)) + f"?offset={offset}"))) == ["offset"]


def test_the_largest_offset_is_an_empty_page(api_client, tenant):
    kb = kb_make(tenant)
    _documents(tenant, kb, ["queued"])
    body = api_client.get(_url(kb) + f"?offset={2**63 - 1}&limit=500").json()
    assert body["results"] == [] and body["count"] == 1


def test_filters_by_one_status_or_several(api_client, tenant):
    kb = kb_make(tenant)
    queued, indexed, failed, embedding = _documents(tenant, kb, ["queued", "indexed", "failed", "embedding"])
    assert _ids(api_client.get(_url(kb) + "?status=failed")) == [failed.pk]
    assert _ids(api_client.get(_url(kb) + "?status=queued&status=failed")) == [failed.pk, queued.pk]
    both = api_client.get(_url(kb) + "?status=queued&status=embedding&status=queued").json()
    assert both["count"] == 2 and [d["id"] for d in both["results"]] == [embedding.pk, queued.pk]
    # An empty value reads as absent, as every optional filter of the API does.
    assert api_client.get(_url(kb) + "?status=").json()["count"] == 4


@pytest.mark.parametrize("value", ["done", "Queued", "queued,failed"])
def test_a_status_that_is_not_one_is_refused_naming_the_statuses(api_client, tenant, value):
    fields = refused_fields(api_client.get(_url(kb_make(tenant)) + f"?status={value}"))
    assert list(fields) == ["status"]
    message = " ".join(fields["status"])
    assert "queued, parsing, chunking, embedding, indexing, indexed, failed" in message
    assert "status=queued&status=failed" in message  # how to ask for several


def test_filters_by_exact_external_id(api_client, tenant):
    kb = kb_make(tenant)
    first, *_ = _documents(tenant, kb, ["queued"] * 12)  # ext-0 .. ext-11
    assert _ids(api_client.get(_url(kb) + "?external_id=ext-0")) == [first.pk]
    assert api_client.get(_url(kb) + "?external_id=ext-").json()["count"] == 0
    assert api_client.get(_url(kb) + "?external_id=EXT-0").json()["count"] == 0


def test_the_external_id_filter_is_not_trimmed(api_client, tenant):
    """Imports keep an external id as their source names it (a file's relative path may start or end with a space):
    trimmed, the filter could not find such a document, and found another one whose id is the trimmed text."""
    kb = kb_make(tenant)
    padded = DocumentFactory(tenant=tenant, knowledge_base=kb, external_id=" notes.md ")
    plain = DocumentFactory(tenant=tenant, knowledge_base=kb, external_id="notes.md")
    assert _ids(api_client.get(_url(kb) + "?external_id=%20notes.md%20")) == [padded.pk]
    assert _ids(api_client.get(_url(kb) + "?external_id=notes.md")) == [plain.pk]


def test_filters_by_creation_time_from_inclusive_to_exclusive(api_client, tenant):
    kb = kb_make(tenant)
    start = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    documents = _documents(tenant, kb, ["queued"] * 4, start=start)  # start, +1 min, +2 min, +3 min

    def at(minutes: int) -> str:
        return (start + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")

    assert _ids(api_client.get(_url(kb) + f"?created_from={at(1)}&created_to={at(3)}")) == [
        documents[2].pk,
        documents[1].pk,
    ]
    assert _ids(api_client.get(_url(kb) + f"?created_from={at(3)}")) == [documents[3].pk]
    assert _ids(api_client.get(_url(kb) + f"?created_to={at(1)}")) == [documents[0].pk]


@pytest.mark.parametrize(
    "query",
    [
        "created_from=2025-01-02T00:00:00Z&created_to=2025-01-01T00:00:00Z",
        "created_from=2025-01-01T00:00:00Z&created_to=2025-01-01T00:00:00Z",
    ],
)
def test_a_reversed_range_is_refused_rather_than_answered_empty(api_client, tenant, query):
    assert list(refused_fields(api_client.get(_url(kb_make(tenant)) + f"?{query}"))) == ["created_to"]


def test_a_time_that_is_not_one_is_refused(api_client, tenant):
    assert list(refused_fields(api_client.get(_url(kb_make(tenant)) + "?created_from=yesterday"))) == ["created_from"]


@pytest.mark.parametrize(
    "query, name",
    [
        # A page number where the API takes an offset: every "page" was the first one.
        ("page=2", "page"),
        ("state=failed", "state"),
        ("statuses=failed", "statuses"),
        ("knowledge_base=1", "knowledge_base"),
    ],
)
def test_an_unknown_query_parameter_is_refused(api_client, tenant, query, name):
    fields = refused_fields(api_client.get(_url(kb_make(tenant)) + f"?{query}"))
    assert list(fields) == [name]
    assert "offset" in fields[name][0] and "external_id" in fields[name][0]


def test_a_single_valued_filter_given_twice_is_refused(api_client, tenant):
    fields = refused_fields(api_client.get(_url(kb_make(tenant)) + "?external_id=a&external_id=b"))
    assert list(fields) == ["external_id"] and "once" in fields["external_id"][0]


def test_a_nul_character_in_a_filter_is_a_400_not_a_database_error(api_client, tenant):
    assert list(refused_fields(api_client.get(_url(kb_make(tenant)) + "?external_id=a%00b"))) == ["external_id"]


# --- who may list: another tenant's knowledge base and, for a limited key, another knowledge base are 404 ------------


def test_another_tenants_knowledge_base_is_404_and_shows_nothing(api_client, other_api_client, tenant):
    kb = kb_make(tenant)
    _documents(tenant, kb, ["queued", "failed"])
    response = other_api_client.get(_url(kb))
    assert response.status_code == 404
    assert set(response.json()) == {"message", "extra"} and "ext-" not in response.content.decode()
    assert other_api_client.get(_url(kb) + "?status=queued&limit=1").status_code == 404


def test_a_key_limited_to_another_knowledge_base_gets_404(api_client, tenant):
    allowed, other = kb_make(tenant, name="allowed"), kb_make(tenant, name="other")
    _documents(tenant, other, ["failed"])
    (allowed_document,) = _documents(tenant, allowed, ["queued"])
    limited = kb_limited_client(tenant, allowed)
    assert limited.get(_url(other)).status_code == 404
    body = limited.get(_url(allowed)).json()
    assert [d["id"] for d in body["results"]] == [allowed_document.pk]
    assert body["status_counts"] == {**ALL_STATUSES_ZERO, "queued": 1}


def test_a_standard_key_may_list_as_it_may_upload(standard_api_client, tenant):
    kb = kb_make(tenant)
    assert standard_api_client.post(_url(kb), {"text": "x"}, format="json").status_code == 202
    assert standard_api_client.get(_url(kb)).json()["count"] == 1


def test_without_a_key_it_is_401(tenant):
    from rest_framework.test import APIClient

    assert APIClient().get(_url(kb_make(tenant))).status_code == 401


def test_the_selectors_show_nothing_of_a_knowledge_base_to_another_tenant(tenant, other_tenant):
    kb = kb_make(tenant)
    _documents(tenant, kb, ["queued", "indexed"])
    assert list(selectors.document_list(tenant=other_tenant, knowledge_base=kb)) == []
    assert selectors.document_status_counts(tenant=other_tenant, knowledge_base=kb) == ALL_STATUSES_ZERO
    assert selectors.document_list(tenant=tenant, knowledge_base=kb).count() == 2
    assert selectors.document_status_counts(tenant=tenant, knowledge_base=kb) == {
        **ALL_STATUSES_ZERO,
        "queued": 1,
        "indexed": 1,
    }


# --- the cost of a page: constant in the number of documents, statuses and pages --------------------------------


def _document_queries(api_client, url: str) -> tuple[int, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        response = api_client.get(url)
    assert response.status_code == 200, response.content[:300]
    document_table = Document._meta.db_table
    return len(captured), [q["sql"] for q in captured.captured_queries if f'"{document_table}"' in q["sql"]]


def test_the_number_of_queries_does_not_grow_with_the_documents_or_their_statuses(api_client, tenant, monkeypatch):
    kb = kb_make(tenant)
    _documents(tenant, kb, ["queued"])
    # The key's first use writes its last-used time, and no later one in this test does.
    monkeypatch.setattr("tenants.services.LAST_USED_RESOLUTION", timedelta(days=1))
    api_client.get(_url(kb))
    few_total, few_document_queries = _document_queries(api_client, _url(kb))
    _documents(tenant, kb, DocumentStatus.values * 8, prefix="more-")
    many_total, many_document_queries = _document_queries(api_client, _url(kb) + "?limit=500")
    assert many_total == few_total
    # The filtered count, the page and the per-status count (one GROUP BY, not one query per status).
    assert len(many_document_queries) == len(few_document_queries) == 3
    assert sum("GROUP BY" in sql for sql in many_document_queries) == 1


def test_a_page_does_not_load_the_documents_sources(api_client, tenant):
    """A text or pre-chunked document keeps its whole source in its row (megabytes, up to 20000 chunks): a page of 500
    must not read them to return none of it."""
    kb = kb_make(tenant)
    DocumentFactory(tenant=tenant, knowledge_base=kb, source_text="x" * 100_000, source_chunks=[{"text": "y"}])
    _, queries = _document_queries(api_client, _url(kb))
    page = next(sql for sql in queries if "ORDER BY" in sql)
    assert "source_text" not in page and "source_chunks" not in page


def test_a_page_of_the_list_is_read_off_an_index_in_its_order_not_sorted(tenant):
    """At 100k documents in one knowledge base, sorting them all for each page is what a page costs; read in the
    index's order, a page costs its own rows. PostgreSQL's planner is kept off whole-table scans and sorts wherever it
    has another way, so that the few rows here (for which any plan is cheap) do not hide which plans the query has:
    without the index, the sort stays."""
    kb = kb_make(tenant)
    page = selectors.document_list(tenant=tenant, knowledge_base=kb)[:50]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_sort = off")
        plan = page.explain()
    assert "document_kb_newest_first" in plan, plan
    assert "Sort" not in plan and "TEMP B-TREE" not in plan, plan
