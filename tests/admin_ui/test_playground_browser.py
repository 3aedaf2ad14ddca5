"""The playground in headless Chromium against the live server, on real Redis and Milvus Lite, with every request to
another host aborted: a tenant admin opens it from the admin index, picks a knowledge base, asks, sees the answer with
its sources and the dedup decision, asks again in other words and is served the stored answer (the default policy),
forces a fresh answer, starts a new conversation, and runs the retrieval test. The chat streams: with an answer
service that takes its time, the decision is on the page before the answer, the answer grows piece by piece into the
one the turn stored, and a failure mid-answer is said in the turn.

`KB_SAVE_SCREENSHOTS=1` writes docs/screenshots/playground.png, playground-retrieval.png and playground-streaming.png
(a turn caught mid-answer)."""

from __future__ import annotations

import re

import pytest
from django.db import OperationalError
from django.urls import reverse

from conversations.models import AnswerState, Conversation, DedupEvent, DedupPolicy, Turn
from conversations.turn import turns
from retrieval.models import KnowledgeBase
from tenants.models import Role
from tests.admin_ui.conftest import login, user_with_role
from tests.conversations.fake_llm import FakeLLM, Reply
from tests.conversations.helpers import indexed_kb

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def handbook(redis_available, milvus_server, tenant):
    KnowledgeBase.objects.create(tenant=tenant, name="Archive (empty)")
    return indexed_kb(tenant, name="Product handbook")


def ask(page, question: str, *, force_refresh: bool = False):
    """Ask in the chat and wait for the turn to be drawn; the turn's element."""
    turns = page.locator("#kb-turns > li[data-turn-id]")
    before = turns.count()
    page.fill("#kb-question", question)
    page.set_checked("#kb-force-refresh", force_refresh)
    page.click("#kb-ask-button")
    page.wait_for_function(
        "(n) => document.querySelectorAll('#kb-turns > li[data-turn-id]').length > n", arg=before, timeout=60_000
    )
    return turns.nth(before)


def decision(turn) -> dict[str, str]:
    rows = turn.locator(".kb-decision-table tr")
    return {rows.nth(i).locator("th").inner_text(): rows.nth(i).locator("td").inner_text() for i in range(rows.count())}


def test_an_admin_chats_with_a_knowledge_base_and_tests_its_retrieval(page, tenant, handbook, screenshot_dir):
    admin = user_with_role(tenant, Role.ADMIN, "admin@acme.example")
    login(page, admin)
    page.click("#kb-link-playground")
    page.wait_for_url(re.compile(r"/playground/"))
    page.select_option("#kb-playground-kb", label="Product handbook")
    page.click("#kb-playground-pick button[type=submit]")
    page.wait_for_load_state()
    assert page.locator("h1").inner_text() == "Playground of Acme"
    assert page.locator("#kb-panel-chat h2").inner_text() == "Chat with Product handbook"

    first = ask(page, "How do I reset my password?")
    assert "reset link" in first.locator("[data-role=answer]").inner_text()
    sources = first.locator(".kb-sources tbody tr")
    assert sources.count() >= 1
    top = sources.nth(0).locator("td")
    assert top.nth(3).inner_text() == "password (password)"
    assert "Reset password" in top.nth(4).inner_text()
    assert re.fullmatch(r"0\.\d{3}", top.nth(1).inner_text())
    assert re.fullmatch(r"0\.\d{3}", top.nth(2).inner_text())  # its similarity, beside what ranked it
    assert page.locator("#kb-ask-error").is_hidden()
    first_decision = decision(first)
    assert first_decision["Action"] == "answered"
    assert first_decision["Matched turn"] == "–"
    assert first_decision["Relaxed"] == "no"
    label = page.locator("#kb-conversation")
    conversation_id = int(label.get_attribute("data-conversation"))
    assert label.inner_text() == f"Conversation #{conversation_id} (playground:admin@acme.example)"

    # The same question in other words: the default policy serves the stored answer, and says which turn it matched.
    second = ask(page, "How can I reset my password?")
    second_decision = decision(second)
    assert second_decision["Action"] == "served_cached", second_decision
    first_id = int(first.get_attribute("data-turn-id"))
    assert second_decision["Matched turn"] == f"turn 1 (#{first_id})"
    threshold = DedupPolicy.objects.for_tenant(tenant).get().threshold
    assert float(second_decision["Similarity"]) >= threshold - 0.0005
    assert second.locator("[data-role=answer]").inner_text() == first.locator("[data-role=answer]").inner_text()
    assert second.locator(".kb-sources tbody tr").count() == sources.count()

    # Force refresh: a fresh answer, never the stored one.
    forced = ask(page, "How can I reset my password?", force_refresh=True)
    forced_decision = decision(forced)
    assert forced_decision["Action"] == "bypassed", forced_decision
    assert "force_refresh" in forced_decision["Reason"], forced_decision
    page.screenshot(path=str(screenshot_dir / "playground.png"), full_page=True)

    conversation = Conversation.objects.for_tenant(tenant).get(pk=conversation_id)
    assert (conversation.knowledge_base_id, conversation.user_id) == (handbook.pk, "playground:admin@acme.example")
    assert Turn.objects.for_tenant(tenant).filter(conversation=conversation).count() == 3
    assert DedupEvent.objects.for_tenant(tenant).filter(conversation=conversation).count() == 3
    # each turn links its audit event
    second.locator(".kb-audit-link a").click()
    page.wait_for_load_state()
    assert "How can I reset my password?" in page.locator("#kb-new-question").inner_text()
    page.go_back()
    page.wait_for_load_state()

    # A new conversation starts from nothing: the first question of it is answered afresh.
    page.click("#kb-new-conversation")
    assert page.locator("#kb-turns > li").count() == 0
    fresh = ask(page, "How much does the Team plan cost?")
    assert decision(fresh)["Action"] == "answered"
    assert int(page.locator("#kb-conversation").get_attribute("data-conversation")) != conversation_id

    # A bad question is the service's message on the page, and no turn.
    page.fill("#kb-question", "a\u0007b")
    page.click("#kb-ask-button")
    page.wait_for_selector("#kb-ask-error:not([hidden])")
    assert page.locator("#kb-ask-error").inner_text().startswith("The question is not valid:")
    assert page.locator("#kb-turns > li").count() == 1

    page.click("#kb-tab-search")
    assert page.locator("#kb-panel-chat").is_hidden()
    page.fill("#kb-query", "export reports as CSV")
    page.fill("#kb-top-k", "3")
    page.click("#kb-search-button")
    page.wait_for_selector("#kb-hits:not([hidden])")
    assert page.locator("#kb-search-error").is_hidden()
    hits = page.locator("#kb-hits tbody tr")
    assert hits.count() == 3
    assert hits.nth(0).locator("td").nth(3).inner_text() == "export (export)"
    scores = [float(hits.nth(i).locator("td").nth(1).inner_text()) for i in range(hits.count())]
    assert scores == sorted(scores, reverse=True)
    assert re.fullmatch(r"3 passages in [\d.]+ ms\.", page.locator("#kb-search-summary").inner_text())
    page.screenshot(path=str(screenshot_dir / "playground-retrieval.png"), full_page=True)

    assert page.aborted == []


def test_an_admin_cannot_open_another_tenants_knowledge_base(page, tenant, other_tenant, handbook):
    theirs = KnowledgeBase.objects.create(tenant=other_tenant, name="Globex secrets")
    login(page, user_with_role(tenant, Role.ADMIN, "admin@acme.example"))
    url = reverse("admin:conversations_conversation_playground")
    assert page.goto(f"{url}?knowledge_base={theirs.pk}").status == 404
    assert page.goto(f"{url}?tenant={other_tenant.pk}").status == 404
    assert "Globex secrets" not in page.content()


# Records, at every change of the chat, what a reader of the page would see: the turn's decision rows, its answer
# text, and whether it has finished; so the order in which they appeared can be checked afterwards.
RECORD_CHANGES = """() => {
  window.kbSeen = [];
  const look = () => {
    const turn = document.querySelector('#kb-turns > li:last-child');
    if (!turn) return;
    const seen = {
      decision: turn.querySelectorAll('.kb-decision-table tr').length,
      answer: turn.querySelector('[data-role=answer]').textContent,
      sources: turn.querySelectorAll('.kb-sources tbody tr').length,
      done: turn.dataset.turnId !== undefined,
    };
    const last = window.kbSeen[window.kbSeen.length - 1];
    if (!last || JSON.stringify(last) !== JSON.stringify(seen)) window.kbSeen.push(seen);
  };
  new MutationObserver(look).observe(document.getElementById('kb-turns'), {subtree: true, childList: true,
    characterData: true, attributes: true});
}"""


def open_playground(page, tenant) -> None:
    login(page, user_with_role(tenant, Role.ADMIN, "admin@acme.example"))
    page.goto(reverse("admin:conversations_conversation_playground"))
    page.select_option("#kb-playground-kb", label="Product handbook")
    page.click("#kb-playground-pick button[type=submit]")
    page.wait_for_load_state()


def test_the_chat_shows_the_decision_first_and_the_answer_as_it_streams(
    page, tenant, handbook, settings, screenshot_dir, monkeypatch
):
    pieces = ["To reset it, ", "open Settings, ", "choose Security ", "and click Reset password [1]."]
    llm = FakeLLM(
        replies=[
            Reply(pieces=pieces, delay=1.5, piece_delay=0.4),
            Reply(pieces=["Open Settings, ", "then Security", "never sent"], delay=0.5, piece_delay=0.3, break_after=2),
            Reply(pieces=["Refunds take ", "five days."]),
        ]
    )
    settings.LLM_BASE_URL, settings.LLM_MODEL, settings.LLM_TIMEOUT = llm.url, "fake", 10
    try:
        open_playground(page, tenant)
        page.evaluate(RECORD_CHANGES)
        page.fill("#kb-question", "How do I reset my password?")
        page.click("#kb-ask-button")
        # Caught mid-answer: the decision and sources drawn, part of the answer, the turn not finished.
        page.wait_for_function(
            "() => { const t = document.querySelector('#kb-turns > li'); return t && t.dataset.turnId === undefined"
            " && t.querySelector('[data-role=answer]').textContent.length > 20; }",
            timeout=60_000,
        )
        page.screenshot(path=str(screenshot_dir / "playground-streaming.png"), full_page=True)
        page.wait_for_selector("#kb-turns > li[data-turn-id]", timeout=60_000)
        first = page.locator("#kb-turns > li").nth(0)
        seen = page.evaluate("window.kbSeen")
        stored = Turn.objects.for_tenant(tenant).get(pk=int(first.get_attribute("data-turn-id")))
        assert stored.answer_state == AnswerState.COMPLETE and stored.answer == "".join(pieces)
        assert first.locator("[data-role=answer]").inner_text() == stored.answer
        assert decision(first)["Action"] == "answered"

        decided = next(i for i, s in enumerate(seen) if s["decision"])
        with_sources = next(i for i, s in enumerate(seen) if s["sources"])
        answered = next(i for i, s in enumerate(seen) if s["answer"])
        done = next(i for i, s in enumerate(seen) if s["done"])
        assert decided < answered and with_sources < answered and answered < done, seen
        # The answer grew on the page one piece at a time, each state a beginning of the stored answer.
        growing = list(dict.fromkeys(s["answer"] for s in seen[answered:done]))
        assert len(growing) >= 3, seen
        assert all(stored.answer.startswith(text) for text in growing), growing
        assert seen[done]["answer"] == stored.answer

        # A stored answer comes whole with the decision.
        again = ask(page, "How can I reset my password?")
        assert decision(again)["Action"] == "served_cached"
        assert again.locator("[data-role=answer]").inner_text() == stored.answer

        # The answer service fails mid-answer: said in the turn, which keeps what had arrived.
        failed = ask(page, "How much does the Team plan cost?")
        error = failed.locator(".kb-turn-error")
        assert error.is_visible()
        assert "recorded as failed" in error.inner_text() and "(HTTP 502)" in error.inner_text(), error.inner_text()
        assert failed.locator("[data-role=answer]").inner_text() == "Open Settings, then Security"
        row = Turn.objects.for_tenant(tenant).get(pk=int(failed.get_attribute("data-turn-id")))
        assert (row.answer_state, row.answer, row.answer_partial) == (
            AnswerState.FAILED,
            "",
            "Open Settings, then Security",
        )
        assert page.locator("#kb-ask-error").is_hidden()

        # The database cannot record a turn: the answer stays, with the error, and no number or id.
        def broken(record):
            raise OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(turns, "turn_persist", broken)
        page.fill("#kb-question", "How long does a refund take?")
        page.click("#kb-ask-button")
        unrecorded = page.locator("#kb-turns > li.kb-turn-failed:not([data-turn-id])")
        unrecorded.wait_for(timeout=60_000)
        text = unrecorded.locator(".kb-turn-error").inner_text()
        assert "could not be recorded" in text and "(HTTP 503)" in text and "recorded as failed" not in text, text
        assert unrecorded.locator("[data-role=answer]").inner_text() == "Refunds take five days."
        assert unrecorded.locator(".kb-question").inner_text() == "How long does a refund take?"
        assert page.aborted == []
    finally:
        llm.close()
