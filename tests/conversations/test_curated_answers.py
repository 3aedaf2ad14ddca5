"""Curated answers through the API: imported from XLSX (200 pairs), served to paraphrases in English and Chinese before
the user's own history, refused to near misses with other numbers or a negation, to a question the model cannot read
and to other tenants and knowledge bases; edits and disables take effect on the next turn; an import reports bad rows
per row and keeps the good ones; a cited chunk that changes voids the citation."""

from __future__ import annotations

import io
import json

import numpy as np
import openpyxl
import pytest
from django.utils import timezone

from conversations.models import CuratedAnswer, DedupEvent, Turn
from conversations.review.review_queue import review_queue_of_day
from retrieval import embeddings
from retrieval.models import Chunk, KnowledgeBase
from tests.conversations.helpers import HANDBOOK, HELP_CENTRE_ZH, indexed_kb
from tests.conversations.test_api import ask, start

MULTILINGUAL = embeddings.USE_MODEL_NAME

# (answer, phrasings, paraphrase asked) per language: the real FAQs among the 200 pairs.
ENGLISH = [
    (
        "Employees get 25 vacation days a year after 5 years of service.",
        ["How many vacation days do I get after 5 years?", "What is the holiday allowance after five years?"],
        "How many days of vacation will I have after 5 years?",
    ),
    (
        "A reset link is emailed to you; open Settings, Security, Reset password.",
        ["How do I reset my password?", "I forgot my password, what should I do?"],
        "How can I reset my password?",
    ),
    (
        "Yes: a refund is possible when the item was not used, within 30 days.",
        ["Can I get a refund if the item was not used?"],
        "Is it possible to get a refund if the item was not used?",
    ),
]
CHINESE = [
    ("退款在审核通过后三到五个工作日到账。", ["退款多久到账？", "退款需要几天才能到账？"], "退款几天能到账？"),
    ("重置密码：打开设置，选择安全，点击重置密码。", ["怎么重置密码？", "忘记密码怎么办？"], "如何重置密码？"),
]
NEAR_MISSES = [
    "How many vacation days do I get after 7 years?",  # another number
    "Can I get a refund if the item was used?",  # the negation dropped
]


def curated_workbook(rows: list[tuple[str, list[str]]], filler: int) -> bytes:
    """An XLSX of `rows` then `filler` made-up pairs: answer, question, question_2."""
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.append(["Answer", "Question", "Question 2"])
    for answer, phrasings in rows:
        sheet.append([answer, phrasings[0], phrasings[1] if len(phrasings) > 1 else None])
    for number in range(filler):
        sheet.append(
            [
                f"Branch {number + 100} opens at 9 and closes at 17.",
                f"When does branch {number + 100} open?",
                f"What are the opening hours of branch {number + 100}?",
            ]
        )
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def import_file(client, knowledge_base, content: bytes, name: str) -> dict:
    upload = io.BytesIO(content)
    upload.name = name
    response = client.post(
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/curated-answers/import/", {"file": upload}, format="multipart"
    )
    assert response.status_code == 201, response.content
    return response.json()


@pytest.fixture
def services(redis_available, milvus_server):
    return milvus_server


@pytest.fixture
def english(services, tenant):
    return indexed_kb(tenant, documents=HANDBOOK, name="help-en")


@pytest.fixture
def chinese(services, tenant):
    return indexed_kb(
        tenant, documents=HELP_CENTRE_ZH, name="help-zh", embedding_model=MULTILINGUAL, text_analyzer="chinese"
    )


@pytest.mark.django_db
@pytest.mark.integration
def test_two_hundred_pairs_from_xlsx_serve_paraphrases_in_english_and_chinese_and_refuse_near_misses(
    api_client, tenant, english, chinese
):
    pairs = [(answer, phrasings) for answer, phrasings, _ in ENGLISH + CHINESE]
    content = curated_workbook(pairs, filler=200 - len(pairs))
    for knowledge_base in (english, chinese):
        imported = import_file(api_client, knowledge_base, content, "faq.xlsx")
        assert (imported["created"], imported["failed"]) == (200, 0)
    ids = {
        answer: curated.pk
        for curated in CuratedAnswer.objects.for_tenant(tenant).filter(knowledge_base=english)
        for answer in [curated.answer]
    }
    for answer, _, paraphrase in ENGLISH:
        body = ask(api_client, start(api_client, english), paraphrase)
        assert body["dedup"]["action"] == "served_cached", (paraphrase, body["dedup"])
        assert body["answer"] == answer
        assert body["dedup"]["curated_answer_id"] == ids[answer]
        assert body["dedup"]["matched_turn_id"] is None
        event = DedupEvent.objects.for_tenant(tenant).get(turn_id=body["turn_id"])
        assert event.curated_answer_id == ids[answer] and event.curated_question
    for answer, _, paraphrase in CHINESE:
        body = ask(api_client, start(api_client, chinese), paraphrase)
        assert body["dedup"]["action"] == "served_cached", (paraphrase, body["dedup"])
        assert body["answer"] == answer
    for near_miss in NEAR_MISSES:
        body = ask(api_client, start(api_client, english), near_miss)
        assert body["dedup"]["action"] != "served_cached", (near_miss, body["dedup"])
        assert body["dedup"]["curated_answer_id"] is None


@pytest.mark.django_db
@pytest.mark.integration
def test_a_disabled_or_edited_answer_takes_effect_on_the_next_turn(api_client, tenant, english):
    answer, phrasings, paraphrase = ENGLISH[1]
    made = api_client.post(
        f"/api/v1/knowledge-bases/{english.pk}/curated-answers/",
        {"answer": answer, "questions": phrasings},
        format="json",
    )
    assert made.status_code == 201, made.content
    curated_id = made.json()["id"]
    conversation = start(api_client, english)
    assert ask(api_client, conversation, paraphrase)["dedup"]["curated_answer_id"] == curated_id
    edited = api_client.patch(
        f"/api/v1/curated-answers/{curated_id}/", {"answer": "Use the reset link."}, format="json"
    )
    assert edited.status_code == 200, edited.content
    # The same conversation: its own copy of the answer reads as the curated answer does now.
    again = ask(api_client, conversation, paraphrase)
    assert (again["answer"], again["dedup"]["curated_answer_id"]) == ("Use the reset link.", curated_id)
    disabled = api_client.patch(f"/api/v1/curated-answers/{curated_id}/", {"enabled": False}, format="json")
    assert disabled.status_code == 200 and disabled.json()["enabled"] is False
    after = ask(api_client, conversation, paraphrase)
    assert after["dedup"]["curated_answer_id"] is None and after["answer"] != "Use the reset link."
    fresh = ask(api_client, start(api_client, english), paraphrase)
    assert fresh["dedup"]["curated_answer_id"] is None
    assert api_client.delete(f"/api/v1/curated-answers/{curated_id}/").status_code == 204
    assert Turn.objects.for_tenant(tenant).filter(curated_answer_id=curated_id).count() == 0


@pytest.mark.django_db
@pytest.mark.integration
def test_curated_answers_never_cross_tenants_or_knowledge_bases(
    api_client, other_api_client, tenant, other_tenant, english, services
):
    answer, phrasings, paraphrase = ENGLISH[1]
    made = api_client.post(
        f"/api/v1/knowledge-bases/{english.pk}/curated-answers/",
        {"answer": answer, "questions": phrasings},
        format="json",
    ).json()
    second = indexed_kb(tenant, documents=HANDBOOK, name="second")
    assert ask(api_client, start(api_client, second), paraphrase)["dedup"]["curated_answer_id"] is None
    theirs = indexed_kb(other_tenant, documents=HANDBOOK, name="theirs")
    assert ask(other_api_client, start(other_api_client, theirs), paraphrase)["dedup"]["curated_answer_id"] is None
    assert other_api_client.get(f"/api/v1/curated-answers/{made['id']}/").status_code == 404
    assert other_api_client.patch(f"/api/v1/curated-answers/{made['id']}/", {"enabled": False}).status_code == 404
    assert other_api_client.delete(f"/api/v1/curated-answers/{made['id']}/").status_code == 404
    assert other_api_client.get(f"/api/v1/knowledge-bases/{english.pk}/curated-answers/").status_code == 404
    refused = other_api_client.post(
        f"/api/v1/knowledge-bases/{theirs.pk}/curated-answers/",
        {"answer": "x", "questions": ["y"], "source_chunk_ids": [Chunk.objects.for_tenant(tenant).first().pk]},
        format="json",
    )
    assert refused.status_code == 400 and "source_chunk_ids" in refused.json()["extra"]["fields"]
    assert CuratedAnswer.objects.for_tenant(tenant).get(pk=made["id"]).enabled


@pytest.mark.django_db
@pytest.mark.integration
def test_an_unreadable_question_is_never_served_a_curated_answer_by_similarity(api_client, english):
    # The bundled model reads Chinese as unknown word pieces: a phrasing in Chinese matches only itself, word for word.
    answer, phrasings, paraphrase = CHINESE[1]
    api_client.post(
        f"/api/v1/knowledge-bases/{english.pk}/curated-answers/",
        {"answer": answer, "questions": phrasings},
        format="json",
    )
    assert ask(api_client, start(api_client, english), paraphrase)["dedup"]["action"] != "served_cached"
    assert ask(api_client, start(api_client, english), "怎么登录？")["dedup"]["action"] != "served_cached"


@pytest.mark.django_db
@pytest.mark.integration
def test_a_changed_cited_chunk_voids_the_citation(api_client, tenant, english):
    answer, phrasings, paraphrase = ENGLISH[1]
    chunk = Chunk.objects.for_tenant(tenant).get(knowledge_base=english, external_id="password#0")
    made = api_client.post(
        f"/api/v1/knowledge-bases/{english.pk}/curated-answers/",
        {"answer": answer, "questions": phrasings, "source_chunk_ids": [chunk.pk]},
        format="json",
    ).json()
    served = ask(api_client, start(api_client, english), paraphrase)
    assert served["dedup"]["curated_answer_id"] == made["id"]
    assert [source["chunk_id"] for source in served["sources"]] == [chunk.pk]
    Chunk.objects.for_tenant(tenant).filter(pk=chunk.pk).update(content_hash="changed")
    refused = ask(api_client, start(api_client, english), paraphrase)
    assert refused["dedup"]["curated_answer_id"] is None and refused["dedup"]["reason"] == "sources changed"
    cited_again = api_client.patch(
        f"/api/v1/curated-answers/{made['id']}/", {"source_chunk_ids": [chunk.pk]}, format="json"
    )
    assert cited_again.status_code == 200
    assert ask(api_client, start(api_client, english), paraphrase)["dedup"]["curated_answer_id"] == made["id"]


@pytest.mark.django_db
@pytest.mark.integration
def test_a_curated_hit_is_a_review_candidate_with_the_phrasing_as_stored_question(api_client, tenant, english):
    answer, phrasings, paraphrase = ENGLISH[1]
    api_client.post(
        f"/api/v1/knowledge-bases/{english.pk}/curated-answers/",
        {"answer": answer, "questions": phrasings},
        format="json",
    )
    body = ask(api_client, start(api_client, english), paraphrase)
    event = DedupEvent.objects.for_tenant(tenant).get(turn_id=body["turn_id"])
    picks = review_queue_of_day(tenant=tenant, day=timezone.localdate(), quota=10, random_share=1.0)
    assert event.pk in {pick.dedup_event_id for pick in picks}
    assert event.curated_question in phrasings


@pytest.mark.django_db
def test_an_import_reports_bad_rows_per_row_and_keeps_the_rest(api_client, tenant, monkeypatch):
    monkeypatch.setattr(
        "conversations.curated.curated.embed_texts",
        lambda texts, model=None: np.ones((len(texts), 384), dtype="float32") / 384**0.5,
    )
    knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name="kb", embedding_dimension=384)
    lines = [
        {"answer": "One.", "questions": ["first?"], "external_id": "a"},
        {"answer": "", "questions": ["no answer?"]},
        "not json",
        {"answer": "Two.", "questions": []},
        {"answer": "Three.", "questions": ["third?"], "external_id": "a"},
        {"answer": "Four.", "questions": ["fourth?"], "source_chunk_ids": [999999]},
        {"answer": "Five.", "question": "fifth?", "colour": "red"},
        {"answer": "Six.", "questions": ["sixth?", "6th?"], "enabled": False},
    ]
    content = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines).encode()
    body = import_file(api_client, knowledge_base, content, "faq.jsonl")
    assert (body["created"], body["failed"]) == (2, 6)
    assert [result["status"] for result in body["results"]] == [201, 400, 400, 400, 409, 400, 400, 201]
    assert [result["row"] for result in body["results"]] == list(range(1, 9))
    assert "answer" in body["results"][1]["error"]["extra"]["fields"]
    assert body["results"][7]["curated_answer"]["questions"] == ["sixth?", "6th?"]
    stored = CuratedAnswer.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base)
    assert sorted(stored.values_list("answer", "enabled")) == [("One.", True), ("Six.", False)]
    csv_body = import_file(
        api_client, knowledge_base, b"answer,question,enabled\nSeven.,seventh?,yes\n,orphan?,\n", "more.csv"
    )
    assert [result["status"] for result in csv_body["results"]] == [201, 400]
    # Excel saves CSV in the system's code page: GBK on a Chinese Windows. It was refused as "not UTF-8".
    gbk = "answer,question\n在“设置 > 账号”中修改绑定的手机号。,怎么改绑手机号\n".encode("gbk")
    gbk_body = import_file(api_client, knowledge_base, gbk, "faq.csv")
    assert gbk_body["results"][0]["curated_answer"]["questions"] == ["怎么改绑手机号"]
    assert gbk_body["results"][0]["curated_answer"]["answer"] == "在“设置 > 账号”中修改绑定的手机号。"
    # Windows-1250 on a Czech Windows: it was read in Windows-1252 letters ("zmìním").
    czech = "answer,question\nHeslo změníte v Nastavení > Účet.,Jak si změním heslo?\n".encode("cp1250")
    czech_body = import_file(api_client, knowledge_base, czech, "faq-cs.csv")
    assert czech_body["results"][0]["curated_answer"]["questions"] == ["Jak si změním heslo?"]
    # A whole-file problem is one 400, and nothing of the file is stored.
    for name, content in (
        ("bad.xlsx", b"not a workbook"),
        ("bad.csv", b"title,text\nx,y\n"),
        ("bad.txt", b"x"),
        ("gbk.jsonl", '{"answer": "一", "questions": ["二"]}'.encode("gbk")),  # JSON is UTF-8
    ):
        upload = io.BytesIO(content)
        upload.name = name
        response = api_client.post(
            f"/api/v1/knowledge-bases/{knowledge_base.pk}/curated-answers/import/", {"file": upload}, format="multipart"
        )
        assert response.status_code == 400, (name, response.content)
        assert response.json()["message"]
    assert stored.count() == 5


@pytest.mark.django_db
@pytest.mark.integration
def test_phrasings_another_model_embedded_are_embedded_again_on_the_next_turn(api_client, tenant, english):
    from conversations.models import CuratedPhrasing

    answer, phrasings, paraphrase = ENGLISH[1]
    made = api_client.post(
        f"/api/v1/knowledge-bases/{english.pk}/curated-answers/",
        {"answer": answer, "questions": phrasings},
        format="json",
    )
    assert made.status_code == 201, made.content
    # As if the knowledge base had been on another model when they were written: a vector of another size and model.
    CuratedPhrasing.objects.for_tenant(tenant).update(vector=np.ones(8, dtype="<f4").tobytes(), vector_model="old")
    turn = ask(api_client, start(api_client, english), paraphrase)
    assert turn["dedup"]["curated_answer_id"] == made.json()["id"]
    stored = CuratedPhrasing.objects.for_tenant(tenant)
    assert stored.count() == len(phrasings) and not stored.filter(vector_model="old").exists()
