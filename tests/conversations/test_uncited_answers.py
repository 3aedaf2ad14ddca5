"""An answer the model made citing none of its passages (what it is told to write when they do not hold the answer)
is never served to a repeat of the question, through the REST API with a local fake OpenAI-compatible service."""

from __future__ import annotations

import pytest

from conversations.models import ConsumedItem, Turn
from tests.conversations.fake_llm import FakeLLM, Reply
from tests.conversations.helpers import indexed_kb
from tests.conversations.test_api import ask, start
from tests.conversations.test_streaming import ask_streamed

pytestmark = pytest.mark.django_db

QUESTION = "How much does the Enterprise plan cost?"
DOES_NOT_SAY = "The passages do not say what the Enterprise plan costs."


@pytest.fixture
def kb(redis_available, milvus_server, tenant):
    return indexed_kb(tenant)


@pytest.fixture
def llm(settings):
    fake = FakeLLM()
    settings.LLM_BASE_URL, settings.LLM_MODEL, settings.LLM_TIMEOUT = fake.url, "fake", 10
    yield fake
    fake.close()


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "streamed"])
def test_an_answer_citing_no_passage_is_never_served_to_a_repeat(api_client, tenant, kb, llm, streamed):
    """Served, it would say "the passages do not say" again from memory, whatever the knowledge base holds by then,
    to a user who asked again because it did not answer. Its passages were shown, so they are consumed all the same:
    the repeat searches past them. A cited answer to the repeat is served to the next one."""
    llm.replies = [Reply(pieces=[DOES_NOT_SAY])]
    conversation_id = start(api_client, kb)
    if streamed:
        b"".join(ask_streamed(api_client, conversation_id, QUESTION).streaming_content)
    else:
        first = ask(api_client, conversation_id, QUESTION)
        assert first["answer"] == DOES_NOT_SAY and first["sources"], first
    turn = Turn.objects.for_tenant(tenant).get()
    assert turn.answer == DOES_NOT_SAY and turn.source_chunk_ids == [] and turn.source_chunks == {}
    assert ConsumedItem.objects.for_tenant(tenant).filter(turn_number=1).exists()
    again = ask(api_client, conversation_id, QUESTION)
    assert again["dedup"]["action"] != "served_cached" and again["answer"] == "It costs 12 dollars [1].", again
    assert again["dedup"]["reason"] == "answer cites no source", again["dedup"]
    third = ask(api_client, conversation_id, QUESTION)
    assert third["dedup"]["action"] == "served_cached" and third["answer"] == again["answer"], third["dedup"]
