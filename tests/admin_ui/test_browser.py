"""The admin side in real headless Chromium (Debian's /usr/bin/chromium driven by Playwright), against the
live test server: a tenant admin changes settings and sees the history; support reviews a false hit and the
dashboard follows; support cannot open the settings page; an admin of A cannot reach B's events.

Screenshots are written under a temporary directory, or under docs/screenshots/ when KB_SAVE_SCREENSHOTS=1.
"""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from conversations.models import DEFAULT_THRESHOLD, DedupEvent, DedupPolicy, ReviewVerdict, SettingsChange
from tests.admin_ui.conftest import login, served_event
from tests.admin_ui.seed import seed_audit_month
from tests.factories import DedupEventFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_admin_changes_threshold_and_allowlist_and_sees_the_history(page, admin_a, tenant_a, screenshot_dir):
    login(page, admin_a)
    page.goto(reverse("admin:conversations_deduppolicy_settings"))
    assert page.locator("h1").inner_text() == "Dedup settings of Tenant A"

    page.fill("#id_threshold", "0.86")
    page.check("input[name=allowlisted_intents][value=pricing]")
    page.click("input[name=_save]")
    page.wait_for_load_state()

    assert "2 change(s) recorded" in page.locator("ul.messagelist").inner_text()
    history = page.locator("#settings-history tbody tr")
    rows = [history.nth(i).inner_text() for i in range(history.count())]
    assert any("policy · threshold" in row and f"{DEFAULT_THRESHOLD:g}" in row and "0.86" in row for row in rows), rows
    assert any("allowlisted_intents" in row and "pricing" in row for row in rows), rows
    assert all(admin_a.username in row for row in rows)
    policy = DedupPolicy.objects.for_tenant(tenant_a).get()
    assert (policy.threshold, policy.allowlisted_intents) == (0.86, ["other", "pricing"])

    # a bad value is refused with a message on the field, and nothing changes
    page.fill("#id_threshold", "1.7")
    page.click("input[name=_save]")
    page.wait_for_load_state()
    assert "give a value above 0 and at most 1" in page.locator(".field-threshold .errorlist").inner_text()
    assert DedupPolicy.objects.for_tenant(tenant_a).get().threshold == 0.86
    assert SettingsChange.objects.for_tenant(tenant_a).count() == 2

    page.goto(reverse("admin:conversations_deduppolicy_settings"))
    page.screenshot(path=str(screenshot_dir / "settings.png"), full_page=True)


def test_support_reviews_a_false_hit_and_the_dashboard_follows(page, support_a, tenant_a, screenshot_dir):
    events = seed_audit_month(tenant_a)
    target = next(
        e
        for e in reversed(events)
        if e.action == "served_cached" and e.review_verdict == ReviewVerdict.UNREVIEWED and e.similarity < 0.93
    )
    reviewed = [e for e in events if e.action == "served_cached" and e.review_verdict != ReviewVerdict.UNREVIEWED]
    false_hits = sum(e.review_verdict == ReviewVerdict.INCORRECT for e in reviewed)
    assert reviewed, "the seed must hold reviewed hits"

    login(page, support_a)
    dashboard = reverse("admin:conversations_dedupevent_dashboard")
    page.goto(dashboard)
    before = page.locator("#fig-false-hit-rate").inner_text()
    assert before == f"{false_hits / len(reviewed) * 100:.1f}%"
    # the charts were drawn by the project's own copy of Chart.js
    canvases = page.locator("canvas")
    assert canvases.count() == 5
    for index in range(canvases.count()):
        canvas = canvases.nth(index)
        assert canvas.evaluate("(canvas) => !!Chart.getChart(canvas)"), canvas.get_attribute("id")
    page.screenshot(path=str(screenshot_dir / "dashboard.png"), full_page=True)

    page.goto(reverse("admin:conversations_dedupevent_changelist") + "?similarity_min=0.85")
    page.set_viewport_size({"width": 1600, "height": 900})
    page.screenshot(path=str(screenshot_dir / "audit-log.png"))
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(
        reverse("admin:conversations_dedupevent_changelist")
        + f"?action=served_cached&reviewed=no&conversation={target.conversation_ref}"
    )
    page.click(f"#result_list a[href*='/{target.pk}/change/'] >> nth=0")
    page.wait_for_load_state()
    assert target.turn.question in page.locator("#kb-new-question").inner_text()
    assert target.matched_turn.question in page.locator("#kb-matched-question").inner_text()
    page.check("input[name=review_verdict][value=incorrect]")
    page.fill("#id_review_note", "Asked about a different plan.")
    page.screenshot(path=str(screenshot_dir / "review.png"), full_page=True)
    page.click("input[name=_save]")
    page.wait_for_load_state()

    target.refresh_from_db()
    assert (target.review_verdict, target.review_note, target.reviewed_by_id) == (
        ReviewVerdict.INCORRECT,
        "Asked about a different plan.",
        support_a.pk,
    )
    page.goto(dashboard)
    after = page.locator("#fig-false-hit-rate").inner_text()
    assert after == f"{(false_hits + 1) / (len(reviewed) + 1) * 100:.1f}%"
    assert after != before


def test_support_cannot_open_the_settings_page(page, support_a, tenant_a):
    login(page, support_a)
    response = page.goto(reverse("admin:conversations_deduppolicy_settings"))
    assert response.status == 403
    response = page.goto(reverse("admin:conversations_deduppolicy_settings") + f"?tenant={tenant_a.pk}")
    assert response.status == 403
    assert page.locator("#id_threshold").count() == 0


def test_admin_of_a_cannot_reach_tenant_b_events_by_url(page, admin_a, tenant_b):
    theirs = served_event(tenant_b, question="Tenant B private question", matched_question="B earlier", similarity=0.97)
    login(page, admin_a)
    page.goto(reverse("admin:conversations_dedupevent_change", args=[theirs.pk]))
    assert page.url.endswith(reverse("admin:index"))
    assert "Tenant B private question" not in page.content()
    page.goto(reverse("admin:conversations_dedupevent_changelist") + f"?conversation={theirs.conversation_ref}")
    assert page.locator("#result_list").count() == 0 or "Tenant B" not in page.locator("#result_list").inner_text()
    response = page.goto(reverse("admin:conversations_dedupevent_dashboard") + f"?tenant={tenant_b.pk}")
    assert response.status == 404
    assert DedupEvent.objects.for_tenant(tenant_b).get(pk=theirs.pk).review_verdict == ReviewVerdict.UNREVIEWED


# Where the similarity chart drew its threshold line and label: the columns of strong threshold-red pixels (no other
# series of that chart is red), and how many of them lie outside the chart area (on the axis, or off the canvas).
THRESHOLD_PIXELS = """(canvas) => {
  const chart = Chart.getChart(canvas);
  const ratio = chart.currentDevicePixelRatio;
  const { left, right, top, bottom } = chart.chartArea;
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  const columns = new Array(canvas.width).fill(0);
  let outside = 0;
  let total = 0;
  for (let y = 0; y < canvas.height; y++) {
    for (let x = 0; x < canvas.width; x++) {
      const i = (y * canvas.width + x) * 4;
      const red = Math.abs(data[i] - 179) < 25 && Math.abs(data[i + 1] - 38) < 25 && Math.abs(data[i + 2] - 30) < 25;
      if (!red || data[i + 3] < 200) continue;
      total++;
      columns[x]++;
      if (x / ratio < left - 1 || x / ratio > right + 1) outside++;
    }
  }
  const line = columns.indexOf(Math.max(...columns));
  return {
    total, outside, lineX: line / ratio, lineHeight: columns[line] / ratio, left, right, top, bottom,
    firstLow: parseFloat(chart.data.labels[0]),
  };
}"""


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.99, 1.0])
def test_the_threshold_line_and_its_label_stay_on_the_similarity_chart(page, support_a, tenant_a, threshold):
    """The chart leaves out the empty bins below 0.5: a threshold under the bins shown (0.3 here, every similarity
    being 0.6 or more) was drawn left of the chart, over the axis or off the canvas, and one at the chart's left edge
    (0.5) had its label, written left of the line, cut off. The line is drawn where the threshold is on the chart's
    axis and the label beside it, inside the chart, whatever the threshold."""
    for similarity in (0.62, 0.71, 0.8, 0.86, 0.93, 0.97):
        DedupEventFactory(tenant=tenant_a, similarity=similarity)
    DedupPolicy.objects.for_tenant(tenant_a).update(threshold=threshold)
    login(page, support_a)
    page.goto(reverse("admin:conversations_dedupevent_dashboard"))
    canvas = page.locator("#kb-chart-similarity")
    page.wait_for_function("() => !!Chart.getChart(document.getElementById('kb-chart-similarity'))")
    drawn = canvas.evaluate(THRESHOLD_PIXELS)

    assert drawn["outside"] == 0, drawn
    assert drawn["left"] - 1 <= drawn["lineX"] <= drawn["right"] + 1, drawn
    assert drawn["lineHeight"] >= 0.4 * (drawn["bottom"] - drawn["top"]), drawn
    expected = drawn["left"] + (threshold - drawn["firstLow"]) / (1 - drawn["firstLow"]) * (
        drawn["right"] - drawn["left"]
    )
    assert abs(drawn["lineX"] - expected) <= 3, drawn
    assert drawn["total"] > drawn["lineHeight"] + 40, drawn  # the label is drawn too, inside the chart


def test_an_admin_sees_which_knowledge_bases_await_a_reindex_after_a_model_change(
    page, admin_a, tenant_a, screenshot_dir
):
    """After a model change the operator's first question is which knowledge bases still refuse searches: the list
    says it per knowledge base, in red where searches are refused, and its filter keeps only those."""
    from retrieval import embeddings
    from retrieval.models import Chunk, Document, KnowledgeBase
    from tests.retrieval.factories import kb_make

    identity = embeddings.model_identity()
    states = {
        "Product manuals": {"embedding_model_identity": identity},
        "Support articles": {
            "embedding_model": "e5-small-v2",
            "embedding_model_identity": "e5-small-v2@0123456789abcdef",
        },
        "Release notes": {"embedding_model_identity": identity, "reindex_status": "running", "reindex_progress": 0.4},
    }
    for name, fields in states.items():
        knowledge_base = kb_make(tenant_a, name=name)
        KnowledgeBase.objects.for_tenant(tenant_a).filter(pk=knowledge_base.pk).update(**fields)
        document = Document.objects.create(tenant=tenant_a, knowledge_base=knowledge_base, title=f"{name} 1")
        Chunk.objects.create(
            tenant=tenant_a, document=document, knowledge_base=knowledge_base, position=0, text="x", content_hash="h"
        )

    login(page, admin_a)
    page.set_viewport_size({"width": 1760, "height": 700})  # the whole list, its re-index column included
    page.goto(reverse("admin:retrieval_knowledgebase_changelist"))
    rows = {
        row.locator("th").inner_text(): row.locator("td.field-search_index").inner_text()
        for row in page.locator("#result_list tbody tr").all()
    }
    assert set(rows) == set(states), rows
    assert "searches refused until re-indexed" in rows["Support articles"], rows
    assert "e5-small-v2@0123456789abcdef" in rows["Support articles"], rows
    assert "searches refused" not in rows["Product manuals"] and "searches refused" not in rows["Release notes"], rows
    refused = page.locator("td.field-search_index strong")
    assert refused.count() == 1 and refused.evaluate("node => getComputedStyle(node).color") == "rgb(186, 33, 33)"
    page.screenshot(path=str(screenshot_dir / "knowledge-bases.png"), full_page=True)

    page.get_by_role("link", name=re.compile("Awaiting a re-index")).click()
    page.wait_for_load_state()
    names = [row.locator("th").inner_text() for row in page.locator("#result_list tbody tr").all()]
    assert names == ["Support articles"], names


def test_an_admin_moves_knowledge_bases_bm25_text_to_a_language_chosen_on_a_page_of_its_own(
    page, admin_a, tenant_a, screenshot_dir
):
    """Twenty analysers are one action, not twenty: it opens a page naming the selected knowledge bases and their
    analyser now, where one is chosen; the re-index starts on that page's button, and only there."""
    from retrieval.models import KnowledgeBase
    from tests.retrieval.factories import kb_make

    moved = kb_make(tenant_a, name="Ajuda")
    kb_make(tenant_a, name="Help centre")

    login(page, admin_a)
    page.goto(reverse("admin:retrieval_knowledgebase_changelist"))
    page.locator("#result_list tbody tr", has_text="Ajuda").locator("input.action-select").check()
    page.select_option("select[name=action]", "reindex_text_as")
    page.click("button[name=index]")
    page.wait_for_load_state()
    assert page.locator("#content-main table tbody tr").all_inner_texts() == [f"Ajuda\t{tenant_a}\tEnglish"]
    assert (
        KnowledgeBase.objects.for_tenant(tenant_a).get(pk=moved.pk).text_analyzer == "english"
    )  # nothing moves before the choice
    page.select_option("#id_text_analyzer", "catalan")
    page.screenshot(path=str(screenshot_dir / "reindex-text.png"), full_page=True)
    page.click("input[name=apply]")
    page.wait_for_url(re.compile(r"/admin/retrieval/knowledgebase/$"))
    assert "Re-indexing 1 knowledge base(s), BM25 text as catalan." in page.locator(".messagelist").inner_text()
    assert KnowledgeBase.objects.for_tenant(tenant_a).get(pk=moved.pk).text_analyzer == "catalan"
    assert KnowledgeBase.objects.for_tenant(tenant_a).get(name="Help centre").text_analyzer == "english"
