"""An operator switches the embedding model to another one of the SAME size (a fine-tuned successor, another model
of 384 dimensions): stored question and intent vectors of the old model must never be compared with the new
model's vectors, whatever cosine the two happen to give. The old QA pairs are then not served (a miss), the new
model's own pairs are, and the intents' example vectors are embedded again.

The second model is the bundled one with every output turned by a fixed rotation, so within each model the
similarities are the bundled model's own, while between the two models the cosine of one text is cos(ANGLE): high
enough to pass any gate, and meaningless. It is put in place through the settings (`EMBEDDING_MODEL_PATH`, which
names the model) and the process's loaded model (`retrieval.embeddings`), as a restart on a new model would.

The chunk index likewise: until a knowledge base is re-indexed onto the new model, a search of it (the search API, a
turn that searches) is refused with a 409 rather than ranking the old model's vectors against the new model's query;
during the re-index the results are served with the index's state; a stored answer needs no search and is served."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations import services
from conversations.models import ConsumedItem, Conversation, DedupEvent, Intent, Turn
from conversations.services import dedup_policy_update
from conversations.turn import candidates, turns
from conversations.turn.state import state_forget, vector_from_bytes
from retrieval import embeddings, milvus, question_index, vectorstore
from retrieval.models import KnowledgeBase, ReindexStatus
from retrieval.services import knowledge_base_reindex
from tests.conversations.helpers import indexed_kb
from tests.conversations.test_api import ask, start

pytestmark = pytest.mark.django_db

QUESTION = "How do I reset my password?"
ANGLE = 0.3  # cos(0.3) = 0.955: every old vector lies above any duplicate gate from its new-model twin


class RotatedModel:
    """The bundled model, its outputs turned by ANGLE in every plane of two consecutive dimensions (norms and the
    model's own similarities unchanged)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def encode(self, texts, **kwargs):
        vectors = np.asarray(self.inner.encode(texts, **kwargs), dtype=np.float32)
        even, odd = vectors[..., 0::2], vectors[..., 1::2]
        turned = np.empty_like(vectors)
        turned[..., 0::2] = even * np.cos(ANGLE) - odd * np.sin(ANGLE)
        turned[..., 1::2] = even * np.sin(ANGLE) + odd * np.cos(ANGLE)
        return turned

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@pytest.fixture
def kb(redis_available, milvus_server, tenant):
    # These tests ask one question again across a switch. With the exclusion window on, its second search leaves out
    # the passages that answer it, and the extractive answer shows nothing, which cites no source and is never served.
    dedup_policy_update(tenant=tenant, exclusion_enabled=False)
    return indexed_kb(tenant)


@pytest.fixture
def switch_model(settings, tmp_path, monkeypatch):
    """Returns a function that moves the process onto the rotated model, named `all-MiniLM-L6-v2-rotated` (its
    files are the bundled model's, so its tokenizer is the same), and re-indexes the given knowledge bases with
    it, as docs/operations.md says to."""

    def switch(*knowledge_bases: KnowledgeBase) -> None:
        link = Path(tmp_path) / "all-MiniLM-L6-v2-rotated"
        link.symlink_to(embeddings.model_path(), target_is_directory=True)
        monkeypatch.setattr(embeddings, "_models", {link.name: RotatedModel(embeddings.embedding_model())})
        settings.EMBEDDING_MODEL_PATH = str(link)
        for knowledge_base in knowledge_bases:
            reindex(knowledge_base)
            assert knowledge_base.embedding_model == "all-MiniLM-L6-v2-rotated"

    return switch


def reindex(knowledge_base: KnowledgeBase) -> None:
    """Re-index the knowledge base with the process's model, as the worker would once the re-index is started."""
    KnowledgeBase.objects.for_tenant(knowledge_base.tenant_id).filter(pk=knowledge_base.pk).update(
        reindex_status=ReindexStatus.RUNNING
    )
    assert knowledge_base_reindex(tenant_id=knowledge_base.tenant_id, knowledge_base_id=knowledge_base.pk)
    knowledge_base.refresh_from_db()


def test_the_fake_model_is_another_model_of_the_same_size(switch_model, kb):
    before = embeddings.embed_query(QUESTION)
    switch_model()
    after = embeddings.embed_query(QUESTION)
    assert embeddings.model_name() == "all-MiniLM-L6-v2-rotated"
    assert after.shape == before.shape
    assert float(before @ after) == pytest.approx(np.cos(ANGLE), abs=1e-4)


@pytest.mark.parametrize("hot_copy", [True, False], ids=["from-redis", "rebuilt-from-database"])
def test_a_session_pair_of_the_old_model_is_not_served_after_a_switch(api_client, tenant, kb, switch_model, hot_copy):
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, QUESTION)
    assert first["dedup"]["action"] == "answered"
    assert ask(api_client, conversation_id, QUESTION)["dedup"]["action"] == "served_cached"

    switch_model(kb)
    if not hot_copy:
        state_forget(tenant_id=tenant.pk, conversation_id=conversation_id)
    again = ask(api_client, conversation_id, QUESTION)
    assert again["dedup"]["action"] == "answered", again["dedup"]
    assert again["dedup"]["matched_turn_id"] is None
    event = DedupEvent.objects.for_tenant(tenant).get(turn_id=again["turn_id"])
    assert "another embedding model" in event.reason

    # The new model's own pair is served, and its hit reads no more than any hit does.
    with CaptureQueriesContext(connection) as captured:
        served = ask(api_client, conversation_id, QUESTION)
    assert served["dedup"]["action"] == "served_cached"
    assert served["dedup"]["matched_turn_id"] == again["turn_id"]
    tables = [q["sql"].split(" FROM ", 1)[1].split()[0].strip('"') for q in captured if q["sql"].startswith("SELECT")]
    assert tables == ["tenants_apikey", "conversations_conversation", "retrieval_chunk"], tables


def _served_only_from_the_new_models_pair(api_client, kb, switch_model, users: list[str]) -> None:
    """A pair asked and served under the bundled model, then the same question after the switch: answered fresh,
    and served from that new pair next; each ask in a conversation of its own, for `users` in turn."""
    first = ask(api_client, start(api_client, kb, user_id=users[0]), QUESTION)
    assert first["dedup"]["action"] == "answered"
    assert ask(api_client, start(api_client, kb, user_id=users[1]), QUESTION)["dedup"]["action"] == "served_cached"

    switch_model(kb)
    again = ask(api_client, start(api_client, kb, user_id=users[2]), QUESTION)
    assert again["dedup"]["action"] == "answered", again["dedup"]
    served = ask(api_client, start(api_client, kb, user_id=users[3]), QUESTION)
    assert served["dedup"]["action"] == "served_cached"
    assert served["dedup"]["matched_turn_id"] == again["turn_id"]


def test_a_user_pair_of_the_old_model_is_not_served_after_a_switch(api_client, tenant, kb, switch_model):
    dedup_policy_update(tenant=tenant, scope="user")
    _served_only_from_the_new_models_pair(api_client, kb, switch_model, ["u1"] * 4)


def test_the_user_scope_window_holds_pairs_of_the_model_in_use_only(
    api_client, tenant, kb, switch_model, settings, monkeypatch
):
    """User scope compares the user's newest pairs: another model's pairs must not take those places. Asked under
    the bundled model, then the rotated one, then the bundled one again (the operator switched back), the first pair
    is still found with a window of one pair, the rotated model's newer pair notwithstanding."""
    monkeypatch.setattr(candidates, "USER_SCOPE_MAX_PAIRS", 1)
    dedup_policy_update(tenant=tenant, scope="user")
    first = ask(api_client, start(api_client, kb, user_id="u1"), QUESTION)
    bundled = embeddings.embedding_model()
    switch_model(kb)
    ask(api_client, start(api_client, kb, user_id="u1"), "Which plans include single sign-on?")
    monkeypatch.setattr(embeddings, "_models", {"all-MiniLM-L6-v2": bundled})
    settings.EMBEDDING_MODEL_PATH = ""
    again = ask(api_client, start(api_client, kb, user_id="u1"), QUESTION)
    assert again["dedup"]["action"] == "served_cached", again["dedup"]
    assert again["dedup"]["matched_turn_id"] == first["turn_id"]


def test_a_tenant_pair_of_the_old_model_is_not_served_after_a_switch(api_client, tenant, kb, switch_model):
    dedup_policy_update(tenant=tenant, scope="tenant")
    _served_only_from_the_new_models_pair(api_client, kb, switch_model, ["a", "b", "c", "d"])

    # The backfill indexes only what the current model can be compared with.
    assert services.question_index_backfill(tenant_id=tenant.pk) == 2


def test_intent_vectors_of_the_old_model_are_embedded_again(api_client, tenant, kb, switch_model):
    assert ask(api_client, start(api_client, kb), "hello")["dedup"]["intent"] == "greeting"
    greeting = Intent.objects.for_tenant(tenant).get(name="greeting")
    old = vector_from_bytes(greeting.example_vectors).reshape(len(greeting.examples), -1)

    switch_model(kb)
    assert ask(api_client, start(api_client, kb), "hello")["dedup"]["intent"] == "greeting"
    greeting.refresh_from_db()
    stored = vector_from_bytes(greeting.example_vectors).reshape(len(greeting.examples), -1)
    assert stored.shape == old.shape
    assert np.allclose(stored, embeddings.embed_texts(greeting.examples), atol=1e-5)
    assert not np.allclose(stored, old, atol=1e-3)


def test_show_me_that_again_after_a_switch_searches_with_the_new_model(
    api_client, tenant, kb, switch_model, monkeypatch
):
    """A "show me that again" searches for the last question that names a topic: asked before the switch, its
    stored vector is of the old model, so the question is embedded again rather than searched with the old vector."""
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, QUESTION)
    switch_model(kb)
    searched = []
    real_search = turns._search

    def recording_search(**kwargs):
        searched.append(np.asarray(kwargs["query_vector"]))
        return real_search(**kwargs)

    monkeypatch.setattr(turns, "_search", recording_search)
    body = ask(api_client, conversation_id, "show me that again")
    assert body["dedup"]["intent"] == "repeat"
    assert len(searched) == 1
    assert np.allclose(searched[0], embeddings.embed_query(QUESTION), atol=1e-5)
    assert Turn.objects.for_tenant(tenant).filter(conversation_id=conversation_id).count() == 2


def test_the_question_index_of_the_old_model_is_left_alone_and_deletes_reach_it(api_client, tenant, kb, switch_model):
    """Deleting a knowledge base removes its question vectors of every model, not only the current one's."""
    dedup_policy_update(tenant=tenant, scope="tenant")
    ask(api_client, start(api_client, kb, user_id="a"), QUESTION)
    switch_model(kb)
    ask(api_client, start(api_client, kb, user_id="b"), QUESTION)
    names = question_index.question_collection_names()
    assert len(names) >= 2
    client = milvus.connect()

    def stored() -> int:
        return sum(
            len(
                client.query(
                    collection_name=name,
                    filter=question_index.question_filter_build(tenant_id=tenant.pk, knowledge_base_id=kb.pk),
                    output_fields=["turn_id"],
                )
            )
            for name in names
        )

    assert stored() == 2
    from lifecycle.services import knowledge_base_delete

    knowledge_base_delete(tenant=tenant, knowledge_base=kb)
    assert stored() == 0


# --- the chunk index of the old model: refused until re-indexed, flagged while re-indexing ---------------------------

OTHER_QUESTION = "Which plans include single sign-on?"


def search(client, kb: KnowledgeBase, query: str = QUESTION):
    return client.post(f"/api/v1/knowledge-bases/{kb.pk}/search/", {"query": query}, format="json")


def kb_set(kb: KnowledgeBase, **fields) -> None:
    KnowledgeBase.objects.for_tenant(kb.tenant_id).filter(pk=kb.pk).update(**fields)


def assert_refused(response, *, queued: bool = False) -> dict:
    assert response.status_code == 409, response.content
    body = response.json()
    assert body["extra"]["code"] == "embedding_model_mismatch"
    assert body["extra"]["query_model"] == embeddings.model_identity()
    assert "'all-MiniLM-L6-v2'" in body["message"] and "'all-MiniLM-L6-v2-rotated'" in body["message"]
    assert ("queued" in body["message"]) == queued
    assert ("Re-index the knowledge base" in body["message"]) == (not queued)
    return body


@pytest.mark.parametrize("recorded", [True, False], ids=["identity-recorded", "identity-never-recorded"])
def test_a_search_of_the_old_models_vectors_is_refused_until_the_reindex_starts(
    api_client, kb, switch_model, settings, monkeypatch, recorded
):
    if recorded:
        kb_set(kb, embedding_model_identity=embeddings.model_identity())
    before = search(api_client, kb)
    assert before.status_code == 200
    assert before.json()["index"] == {"status": "current", "reindex_progress": None}
    best = before.json()["results"][0]["chunk_id"]

    switch_model()
    assert_refused(search(api_client, kb))
    kb_set(kb, reindex_status=ReindexStatus.RUNNING)  # started, its task not yet taken up by a worker
    assert_refused(search(api_client, kb), queued=True)

    # Once a worker runs it, searches are served, flagged, while the vectors are rebuilt batch by batch.
    settings.INGEST_EMBED_BATCH = 1
    during = []
    real_upsert = vectorstore.vectors_upsert

    def upsert_then_search(**kwargs):
        real_upsert(**kwargs)
        if not during:
            during.append(search(api_client, kb))

    monkeypatch.setattr(vectorstore, "vectors_upsert", upsert_then_search)
    reindex(kb)
    assert during[0].status_code == 200, during[0].content
    assert during[0].json()["index"] == {"status": "reindexing", "reindex_progress": 0.0}

    after = search(api_client, kb)
    assert after.status_code == 200
    assert after.json()["index"] == {"status": "current", "reindex_progress": None}
    assert after.json()["results"][0]["chunk_id"] == best


def test_a_turn_that_would_search_the_old_models_vectors_is_refused_and_leaves_nothing(
    api_client, tenant, kb, switch_model
):
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, QUESTION)
    assert first["index"] == {"status": "current", "reindex_progress": None}
    counts = (
        Turn.objects.for_tenant(tenant).count(),
        ConsumedItem.objects.for_tenant(tenant).count(),
        DedupEvent.objects.for_tenant(tenant).count(),
    )
    assert counts[1] > 0

    switch_model()
    for mode in ("answer", "retrieve"):
        response = api_client.post(
            f"/api/v1/conversations/{conversation_id}/messages/",
            {"question": OTHER_QUESTION, "mode": mode},
            format="json",
        )
        assert_refused(response)
    assert (
        Turn.objects.for_tenant(tenant).count(),
        ConsumedItem.objects.for_tenant(tenant).count(),
        DedupEvent.objects.for_tenant(tenant).count(),
    ) == counts
    assert Conversation.objects.for_tenant(tenant).get(pk=conversation_id).turn_count == 1

    reindex(kb)
    second = ask(api_client, conversation_id, OTHER_QUESTION)
    assert second["dedup"]["action"] == "answered" and second["sources"]
    assert second["index"] == {"status": "current", "reindex_progress": None}
    assert Turn.objects.for_tenant(tenant).get(pk=second["turn_id"]).number == 2


def test_a_stored_answer_is_served_from_a_knowledge_base_of_another_model(
    api_client, kb, switch_model, settings, monkeypatch
):
    """A stored answer needs no search (its question vector carries its own model): served while the knowledge base
    waits for its re-index; a question that needs a search is refused."""
    bundled = embeddings.embedding_model()
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, QUESTION)
    switch_model(kb)  # the knowledge base is the rotated model's now; then the operator switches the web back
    monkeypatch.setattr(embeddings, "_models", {"all-MiniLM-L6-v2": bundled})
    settings.EMBEDDING_MODEL_PATH = ""

    served = ask(api_client, conversation_id, QUESTION)
    assert served["dedup"]["action"] == "served_cached", served["dedup"]
    assert served["sources"] and served["index"] is None
    response = api_client.post(
        f"/api/v1/conversations/{conversation_id}/messages/", {"question": OTHER_QUESTION}, format="json"
    )
    assert response.status_code == 409
    assert "'all-MiniLM-L6-v2-rotated'" in response.json()["message"]


def test_a_turn_during_a_reindex_and_after_a_failed_one_says_so(api_client, tenant, kb):
    kb_set(kb, reindex_status=ReindexStatus.RUNNING, reindex_progress=0.4)
    conversation_id = start(api_client, kb)
    assert ask(api_client, conversation_id, QUESTION)["index"] == {"status": "reindexing", "reindex_progress": 0.4}

    # A rebuild that kept the model and stopped part way left every vector that model's.
    kb_set(kb, reindex_status=ReindexStatus.FAILED)
    assert ask(api_client, conversation_id, OTHER_QUESTION)["index"] == {"status": "current", "reindex_progress": None}
    assert search(api_client, kb).json()["index"]["status"] == "current"

    # One that was moving the knowledge base from another model left that model's vectors among the new ones.
    kb_set(kb, reindex_from_model_identity="e5-small@0123456789abcdef", reindex_error="Milvus is down")
    turns = Turn.objects.for_tenant(tenant).count()
    response = api_client.post(
        f"/api/v1/conversations/{conversation_id}/messages/", {"question": "Can I export my data?"}, format="json"
    )
    for refused in (response, search(api_client, kb)):
        assert refused.status_code == 409, refused.content
        body = refused.json()
        assert body["extra"]["code"] == "embedding_model_mismatch"
        assert body["extra"]["reindex_from_model"] == "e5-small@0123456789abcdef"
        assert "stopped part way (Milvus is down)" in body["message"] and "'e5-small'" in body["message"]
    assert Turn.objects.for_tenant(tenant).count() == turns


def test_an_empty_knowledge_base_of_another_model_is_searched_not_refused(api_client, tenant, redis_available):
    empty = KnowledgeBase.objects.create(
        tenant=tenant, name="empty", embedding_model="e5-small", embedding_model_identity="e5-small@0123456789abcdef"
    )
    response = search(api_client, empty)
    assert response.status_code == 200, response.content
    assert response.json()["results"] == []


@pytest.mark.parametrize(
    ("scope", "hot_copy"),
    [("session", True), ("session", False), ("user", True), ("tenant", True)],
    ids=["session-from-redis", "session-rebuilt-from-database", "user", "tenant"],
)
def test_a_pair_answered_from_a_partial_index_is_never_served_as_a_duplicate(api_client, tenant, kb, scope, hot_copy):
    """A turn asked while a re-index runs is answered from an index that may miss what is not rebuilt yet: it says
    so, and its QA pair never answers a later duplicate (not even once the re-index is done): the next ask retrieves
    afresh, and that full pair is the one served from then on."""
    dedup_policy_update(tenant=tenant, scope=scope)
    session = start(api_client, kb, user_id="u1")

    def conversation() -> int:
        return session if scope == "session" else start(api_client, kb, user_id="u1")

    kb_set(kb, reindex_status=ReindexStatus.RUNNING, reindex_progress=0.4)
    partial = ask(api_client, conversation(), QUESTION)
    assert partial["index"]["status"] == "reindexing" and partial["dedup"]["action"] == "answered"
    still_partial = ask(api_client, conversation(), QUESTION)
    if scope == "tenant":  # the partial pair never reached the tenant-scope index: nothing to refuse
        assert still_partial["dedup"]["action"] == "answered", still_partial["dedup"]
    else:
        assert still_partial["dedup"]["action"] == "bypassed", still_partial["dedup"]
        assert still_partial["dedup"]["reason"] == "answered from a partial index", still_partial["dedup"]

    kb_set(kb, reindex_status=ReindexStatus.DONE, reindex_progress=1.0)
    if not hot_copy:
        state_forget(tenant_id=tenant.pk, conversation_id=session)
    again = ask(api_client, conversation(), QUESTION)
    # Refused (bypassed) for the partial pair in its index; with tenant scope there was no such pair to refuse.
    assert again["dedup"]["action"] == ("answered" if scope == "tenant" else "bypassed"), again["dedup"]
    assert again["index"] == {"status": "current", "reindex_progress": None} and again["sources"]
    if scope != "tenant":  # the tenant-scope index never holds such a pair (it would take a candidate's place)
        assert again["dedup"]["reason"] == "answered from a partial index", again["dedup"]
        event = DedupEvent.objects.for_tenant(tenant).get(turn_id=again["turn_id"])
        assert event.reason == "answered from a partial index"
        assert event.matched_turn_ref in (partial["turn_id"], still_partial["turn_id"])

    served = ask(api_client, conversation(), QUESTION)
    assert served["dedup"]["action"] == "served_cached", served["dedup"]
    assert served["dedup"]["matched_turn_id"] == again["turn_id"]
    if scope == "tenant":  # nor does the backfill index them (two partial pairs, two full ones)
        assert services.question_index_backfill(tenant_id=tenant.pk) == 2
