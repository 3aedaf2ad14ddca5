"""The admin side through Django's test client: settings page with history, audit-log review (filters, search,
detail, review, CSV), dashboard; every page scoped to the user's tenant and role."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from conversations.models import DEFAULT_THRESHOLD, DedupEvent, DedupPolicy, Intent, SettingsChange
from tenants.models import Role
from tests.admin_ui.conftest import served_event, user_with_role
from tests.factories import DedupEventFactory

pytestmark = pytest.mark.django_db

SETTINGS_URL = reverse("admin:conversations_deduppolicy_settings")
DASHBOARD_URL = reverse("admin:conversations_dedupevent_dashboard")
EVENTS_URL = reverse("admin:conversations_dedupevent_changelist")
EXPORT_URL = reverse("admin:conversations_dedupevent_export")
HISTORY_URL = reverse("admin:conversations_settingschange_changelist")


def _event_url(event: DedupEvent) -> str:
    return reverse("admin:conversations_dedupevent_change", args=[event.pk])


def settings_post_data(response, **overrides) -> dict:
    """The settings form as the page renders it, with `overrides` applied (policy fields by name, intent rows
    as intents-<i>-<field>)."""
    form = response.context["form"]
    formset = response.context["formset"]
    data = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if isinstance(value, bool):
            if value:
                data[name] = "on"
        elif value is not None:
            data[name] = value
    data.update({f"intents-{key}": value for key, value in formset.management_form.initial.items()})
    for index, intent_form in enumerate(formset.initial_forms):
        initial = intent_form.initial
        for name in ("id", "name", "behaviour", "examples"):
            data[f"intents-{index}-{name}"] = initial[name]
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


# --- settings page -----------------------------------------------------------------------------------------
def test_admin_opens_own_settings_page(client, admin_a, tenant_a):
    client.force_login(admin_a)
    response = client.get(SETTINGS_URL)
    assert response.status_code == 200
    assert response.context["tenant"] == tenant_a
    assert set(dict(response.context["form"].fields["allowlisted_intents"].choices)) == {
        "other",
        "pricing",
        "greeting",
    }
    assert b"secret-intent-of-b" not in response.content


def test_support_gets_403_on_settings_page(client, support_a, tenant_a):
    client.force_login(support_a)
    assert client.get(SETTINGS_URL).status_code == 403
    assert client.get(SETTINGS_URL, {"tenant": tenant_a.pk}).status_code == 403
    response = client.post(f"{SETTINGS_URL}?tenant={tenant_a.pk}", {"threshold": "0.5"})
    assert response.status_code == 403
    assert DedupPolicy.objects.for_tenant(tenant_a).get().threshold == DEFAULT_THRESHOLD


def test_admin_of_a_cannot_open_settings_of_b(client, admin_a, tenant_b):
    client.force_login(admin_a)
    assert client.get(SETTINGS_URL, {"tenant": tenant_b.pk}).status_code == 404
    assert client.post(f"{SETTINGS_URL}?tenant={tenant_b.pk}", {"threshold": "0.5"}).status_code == 404
    assert client.get(SETTINGS_URL, {"tenant": "not-a-number"}).status_code == 404
    assert DedupPolicy.objects.for_tenant(tenant_b).get().threshold == DEFAULT_THRESHOLD


def test_settings_change_is_saved_and_recorded(client, admin_a, tenant_a, tenant_b):
    client.force_login(admin_a)
    page = client.get(SETTINGS_URL)
    data = settings_post_data(page, threshold="0.85", allowlisted_intents=["other", "pricing"], shadow_mode="on")
    response = client.post(f"{SETTINGS_URL}?tenant={tenant_a.pk}", data)
    assert response.status_code == 302, response.context and (
        response.context["form"].errors,
        response.context["formset"].errors,
        response.context["formset"].non_form_errors(),
    )

    policy = DedupPolicy.objects.for_tenant(tenant_a).get()
    assert (policy.threshold, policy.allowlisted_intents, policy.shadow_mode) == (0.85, ["other", "pricing"], True)
    history = {
        change.field: (change.old_value, change.new_value, change.changed_by_id)
        for change in SettingsChange.objects.for_tenant(tenant_a)
    }
    assert history == {
        "threshold": (DEFAULT_THRESHOLD, 0.85, admin_a.pk),
        "allowlisted_intents": (["other"], ["other", "pricing"], admin_a.pk),
        "shadow_mode": (False, True, admin_a.pk),
    }
    assert not SettingsChange.objects.for_tenant(tenant_b).exists()
    assert DedupPolicy.objects.for_tenant(tenant_b).get().threshold == DEFAULT_THRESHOLD

    shown = client.get(SETTINGS_URL)
    assert [change.field for change in shown.context["history"]][:3] != []
    assert b"0.85" in shown.content


def test_saving_unchanged_settings_records_nothing(client, admin_a, tenant_a):
    client.force_login(admin_a)
    response = client.post(f"{SETTINGS_URL}?tenant={tenant_a.pk}", settings_post_data(client.get(SETTINGS_URL)))
    assert response.status_code == 302
    assert not SettingsChange.objects.for_tenant(tenant_a).exists()


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"threshold": "1.5"}, "threshold", "cosine similarity"),
        ({"threshold": "0"}, "threshold", "cosine similarity"),
        ({"threshold": "abc"}, "threshold", "Enter a number"),
        ({"question_window": "0"}, "question_window", "greater than or equal to 1"),
        ({"exclusion_window": "500"}, "exclusion_window", "less than or equal to 100"),
        ({"allowlisted_intents": ["secret-intent-of-b"]}, "allowlisted_intents", "Select a valid choice"),
        ({"scope": "galaxy"}, "scope", "Select a valid choice"),
    ],
)
def test_invalid_settings_show_field_errors_and_save_nothing(client, admin_a, tenant_a, overrides, field, message):
    client.force_login(admin_a)
    data = settings_post_data(client.get(SETTINGS_URL), **overrides)
    data["min_results"] = "7"  # a valid change in the same submission must not be saved either
    response = client.post(f"{SETTINGS_URL}?tenant={tenant_a.pk}", data)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors and message in " ".join(errors[field])
    assert message.encode() in response.content
    policy = DedupPolicy.objects.for_tenant(tenant_a).get()
    assert (policy.threshold, policy.min_results) == (DEFAULT_THRESHOLD, 3)
    assert not SettingsChange.objects.for_tenant(tenant_a).exists()


def test_intents_are_edited_inline_with_history(client, admin_a, tenant_a):
    client.force_login(admin_a)
    page = client.get(SETTINGS_URL)
    rows = {f.initial["name"]: i for i, f in enumerate(page.context["formset"].initial_forms)}
    pricing = Intent.objects.for_tenant(tenant_a).get(name="pricing")
    Intent.objects.for_tenant(tenant_a).filter(pk=pricing.pk).update(example_vectors=b"cached")
    new = len(rows)
    data = settings_post_data(
        page,
        **{
            f"intents-{rows['pricing']}-examples": "how much does it cost\n  what is the price  \n\n",
            f"intents-{new}-name": "billing",
            f"intents-{new}-behaviour": "normal",
            f"intents-{new}-examples": "where is my invoice",
        },
    )
    response = client.post(f"{SETTINGS_URL}?tenant={tenant_a.pk}", data)
    assert response.status_code == 302, response.context and response.context["formset"].errors

    pricing.refresh_from_db()
    assert pricing.examples == ["how much does it cost", "what is the price"]
    assert pricing.example_vectors is None  # the classifier embeds the new phrases
    billing = Intent.objects.for_tenant(tenant_a).get(name="billing")
    assert billing.examples == ["where is my invoice"]
    changes = {(c.subject, c.field) for c in SettingsChange.objects.for_tenant(tenant_a)}
    assert changes == {("intent:pricing", "examples"), ("intent:billing", "created")}

    # the new intent can now go on the allowlist, and deleting it takes it off again
    page = client.get(SETTINGS_URL)
    assert "billing" in dict(page.context["form"].fields["allowlisted_intents"].choices)
    rows = {f.initial["name"]: i for i, f in enumerate(page.context["formset"].initial_forms)}
    client.post(
        f"{SETTINGS_URL}?tenant={tenant_a.pk}", settings_post_data(page, allowlisted_intents=["other", "billing"])
    )
    assert DedupPolicy.objects.for_tenant(tenant_a).get().allowlisted_intents == ["billing", "other"]
    page = client.get(SETTINGS_URL)
    client.post(
        f"{SETTINGS_URL}?tenant={tenant_a.pk}", settings_post_data(page, **{f"intents-{rows['billing']}-DELETE": "on"})
    )
    assert not Intent.objects.for_tenant(tenant_a).filter(name="billing").exists()
    assert DedupPolicy.objects.for_tenant(tenant_a).get().allowlisted_intents == ["other"]
    assert SettingsChange.objects.for_tenant(tenant_a).filter(subject="intent:billing", field="deleted").exists()


def test_builtin_intent_cannot_be_deleted_and_examples_are_required(client, admin_a, tenant_a):
    client.force_login(admin_a)
    page = client.get(SETTINGS_URL)
    rows = {f.initial["name"]: i for i, f in enumerate(page.context["formset"].initial_forms)}
    data = settings_post_data(
        page,
        threshold="0.8",
        **{f"intents-{rows['greeting']}-DELETE": "on", f"intents-{rows['pricing']}-examples": "   "},
    )
    response = client.post(f"{SETTINGS_URL}?tenant={tenant_a.pk}", data)
    assert response.status_code == 200
    assert b"Give at least one example phrase." in response.content
    assert Intent.objects.for_tenant(tenant_a).filter(name="greeting").exists()
    assert DedupPolicy.objects.for_tenant(tenant_a).get().threshold == DEFAULT_THRESHOLD

    data = settings_post_data(client.get(SETTINGS_URL), **{f"intents-{rows['greeting']}-DELETE": "on"})
    response = client.post(f"{SETTINGS_URL}?tenant={tenant_a.pk}", data)
    assert response.status_code == 200
    assert b"is built in and cannot be deleted" in response.content
    assert Intent.objects.for_tenant(tenant_a).filter(name="greeting").exists()


def test_the_settings_page_saves_with_as_many_intents_as_a_tenant_may_have(client, admin_a, tenant_a):
    """At the intent limit the page's form still fits in Django's field limit (each intent row is several fields),
    so it saves; past about 250 intents it could not be saved at all."""
    from django.conf import settings

    from conversations.admin.services import MAX_INTENTS_PER_TENANT

    existing = Intent.objects.for_tenant(tenant_a).count()
    Intent.objects.bulk_create(
        [Intent(tenant=tenant_a, name=f"filler-{n}", examples=["a"]) for n in range(MAX_INTENTS_PER_TENANT - existing)]
    )
    client.force_login(admin_a)
    data = settings_post_data(client.get(SETTINGS_URL), threshold="0.8")
    assert len(data) < settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    response = client.post(f"{SETTINGS_URL}?tenant={tenant_a.pk}", data)
    assert response.status_code == 302
    assert DedupPolicy.objects.for_tenant(tenant_a).get().threshold == 0.8


@pytest.mark.parametrize("deleting_row", ["first", "second"])
def test_one_intent_on_two_rows_is_a_form_error_and_saves_nothing(client, admin_a, tenant_a, deleting_row):
    """Only a hand-made form repeats an intent's id; deleting it on one row and editing it on the other was a
    500 (or a lost edit, the other way round)."""
    client.force_login(admin_a)
    page = client.get(SETTINGS_URL)
    rows = {f.initial["name"]: i for i, f in enumerate(page.context["formset"].initial_forms)}
    pricing = Intent.objects.for_tenant(tenant_a).get(name="pricing")
    extra = len(rows)
    delete_on, edit_on = (rows["pricing"], extra) if deleting_row == "first" else (extra, rows["pricing"])
    data = settings_post_data(
        page,
        threshold="0.8",
        **{
            f"intents-{extra}-id": pricing.pk,
            f"intents-{extra}-name": "pricing",
            f"intents-{delete_on}-DELETE": "on",
            f"intents-{delete_on}-examples": "how much does it cost",
            f"intents-{edit_on}-examples": "what is the price",
        },
    )
    response = client.post(f"{SETTINGS_URL}?tenant={tenant_a.pk}", data)
    assert response.status_code == 200
    assert b"more than one row" in response.content
    pricing.refresh_from_db()
    assert pricing.examples == ["how much does it cost"]
    assert DedupPolicy.objects.for_tenant(tenant_a).get().threshold == DEFAULT_THRESHOLD
    assert not SettingsChange.objects.for_tenant(tenant_a).exists()


def test_policy_and_intent_model_pages_point_to_the_settings_page(client, admin_a, tenant_a):
    client.force_login(admin_a)
    policy = DedupPolicy.objects.for_tenant(tenant_a).get()
    response = client.get(reverse("admin:conversations_deduppolicy_change", args=[policy.pk]))
    assert response.status_code == 302 and response.url == f"{SETTINGS_URL}?tenant={tenant_a.pk}"
    intent = Intent.objects.for_tenant(tenant_a).get(name="pricing")
    response = client.post(reverse("admin:conversations_intent_change", args=[intent.pk]), {"behaviour": "repeat"})
    assert response.status_code == 403


def test_settings_history_is_in_the_audit_log_for_support_only_of_own_tenant(
    client, admin_a, support_a, admin_b, tenant_a
):
    client.force_login(admin_a)
    client.post(f"{SETTINGS_URL}?tenant={tenant_a.pk}", settings_post_data(client.get(SETTINGS_URL), threshold="0.87"))
    client.force_login(support_a)
    response = client.get(HISTORY_URL)
    assert response.status_code == 200
    assert [(c.field, c.new_value) for c in response.context["cl"].result_list] == [("threshold", 0.87)]
    client.force_login(admin_b)
    assert list(client.get(HISTORY_URL).context["cl"].result_list) == []


# --- audit-log review --------------------------------------------------------------------------------------
@pytest.fixture
def events_a(tenant_a):
    now = timezone.now()
    hit = served_event(
        tenant_a, question="How much is the pro plan?", matched_question="What does pro cost?", similarity=0.94
    )
    near = served_event(
        tenant_a, question="Can I pay by invoice?", matched_question="How do I get an invoice?", similarity=0.91
    )
    miss = DedupEventFactory(tenant=tenant_a, similarity=0.62, intent="pricing")
    old = DedupEventFactory(tenant=tenant_a, similarity=0.3)
    DedupEvent.objects.for_tenant(tenant_a).filter(pk=old.pk).update(created_at=now - timedelta(days=10))
    return {"hit": hit, "near": near, "miss": miss, "old": old}


@pytest.fixture
def event_b(tenant_b):
    return served_event(
        tenant_b, question="Tenant B private question", matched_question="B earlier question", similarity=0.99
    )


def _listed(response) -> set[int]:
    return {event.pk for event in response.context["cl"].result_list}


def test_support_lists_only_own_tenant_events(client, support_a, events_a, event_b):
    client.force_login(support_a)
    response = client.get(EVENTS_URL)
    assert response.status_code == 200
    assert _listed(response) == {event.pk for event in events_a.values()}
    assert b"Tenant B private question" not in response.content


def test_filters_and_search(client, support_a, events_a, event_b):
    client.force_login(support_a)
    today = timezone.localdate().isoformat()
    cases = {
        "action=served_cached": {"hit", "near"},
        "similarity_min=0.92": {"hit"},
        "similarity_min=0.6&similarity_max=0.92": {"near", "miss"},
        f"created_from={today}&created_to={today}": {"hit", "near", "miss"},
        f"created_to={(timezone.localdate() - timedelta(days=5)).isoformat()}": {"old"},
        "intent=pricing": {"miss"},
        f"conversation={events_a['hit'].conversation_ref}": {"hit"},
        "q=invoice": {"near"},
        "reviewed=no": {"hit", "near", "miss", "old"},
        "_facets=True&similarity_min=0.92": {"hit"},
    }
    for query, expected in cases.items():
        response = client.get(f"{EVENTS_URL}?{query}")
        assert response.status_code == 200, query
        assert _listed(response) == {events_a[name].pk for name in expected}, query


def test_intent_filter_offers_only_own_tenant_intents(client, support_a, events_a, tenant_b):
    DedupEventFactory(tenant=tenant_b, intent="secret-intent-of-b")
    client.force_login(support_a)
    response = client.get(EVENTS_URL)
    assert b"secret-intent-of-b" not in response.content


@pytest.mark.parametrize(
    "query", ["similarity_min=abc", "created_from=2026-13-45", "conversation=x1", "created_to=9999-12-31"]
)
def test_bad_filter_input_is_refused_without_a_server_error(client, support_a, events_a, query):
    client.force_login(support_a)
    response = client.get(f"{EVENTS_URL}?{query}")
    assert response.status_code in (200, 302)
    if response.status_code == 302:
        assert "e=1" in response.url


def test_a_date_filter_at_the_end_of_the_calendar_is_refused_by_export_and_actions(client, support_a, events_a):
    """The "to" date's period ends at the start of the next day, which 9999-12-31 does not have."""
    client.force_login(support_a)
    refused = client.get(f"{EXPORT_URL}?created_to=9999-12-31")
    assert refused.status_code == 302 and refused.url == EVENTS_URL
    response = client.post(
        f"{EVENTS_URL}?created_to=9999-12-31", {"action": "mark_incorrect", "select_across": "1", "index": 0}
    )
    assert response.status_code == 302 and "e=1" in response.url
    assert not DedupEvent.objects.for_tenant(events_a["hit"].tenant).exclude(review_verdict="unreviewed").exists()


def test_detail_shows_both_questions_and_answers(client, support_a, events_a):
    client.force_login(support_a)
    response = client.get(_event_url(events_a["hit"]))
    assert response.status_code == 200
    content = response.content.decode()
    assert "How much is the pro plan?" in content and "What does pro cost?" in content
    assert "Stored answer to: What does pro cost?" in content
    assert content.index('id="kb-new-question"') < content.index('id="kb-matched-question"')


def test_support_reviews_only_the_review_fields(client, support_a, events_a):
    client.force_login(support_a)
    event = events_a["hit"]
    response = client.post(
        _event_url(event),
        {"review_verdict": "incorrect", "review_note": "different plan", "action": "answered", "similarity": "0.1"},
    )
    assert response.status_code == 302
    event.refresh_from_db()
    assert (event.review_verdict, event.review_note, event.reviewed_by_id) == (
        "incorrect",
        "different plan",
        support_a.pk,
    )
    assert event.reviewed_at is not None
    assert (event.action, event.similarity) == ("served_cached", 0.94)


def test_review_actions_with_a_note(client, support_a, events_a, event_b):
    client.force_login(support_a)
    response = client.post(
        EVENTS_URL,
        {
            "action": "mark_incorrect",
            "_selected_action": [events_a["hit"].pk, events_a["near"].pk, event_b.pk],
            "note": "wrong product",
            "index": 0,
        },
    )
    assert response.status_code == 302
    verdicts = dict(DedupEvent.objects.for_tenant(events_a["hit"].tenant).values_list("pk", "review_verdict"))
    assert verdicts[events_a["hit"].pk] == verdicts[events_a["near"].pk] == "incorrect"
    assert verdicts[events_a["miss"].pk] == "unreviewed"
    event_b.refresh_from_db()
    assert event_b.review_verdict == "unreviewed"
    assert (
        DedupEvent.objects.for_tenant(events_a["hit"].tenant).get(pk=events_a["hit"].pk).review_note == "wrong product"
    )


def test_a_bulk_review_without_a_note_keeps_the_notes_already_written(client, support_a, events_a):
    """The bulk actions' note box is optional and starts empty: re-marking events reviewed one by one with their
    reasons wiped every reason with the empty box. An empty (or blank) note now leaves each note as it was; a note
    that is given still replaces them."""
    client.force_login(support_a)
    hit, near = events_a["hit"], events_a["near"]
    client.post(_event_url(hit), {"review_verdict": "incorrect", "review_note": "asked about another plan"})
    client.post(_event_url(near), {"review_verdict": "correct", "review_note": "same question"})

    for note in ("", "   "):
        response = client.post(
            EVENTS_URL,
            {"action": "mark_incorrect", "_selected_action": [hit.pk, near.pk], "note": note, "index": 0},
        )
        assert response.status_code == 302
        rows = dict(
            DedupEvent.objects.for_tenant(hit.tenant).filter(pk__in=[hit.pk, near.pk]).values_list("pk", "review_note")
        )
        assert rows == {hit.pk: "asked about another plan", near.pk: "same question"}, repr(note)
        assert DedupEvent.objects.for_tenant(hit.tenant).get(pk=near.pk).review_verdict == "incorrect"

    client.post(
        EVENTS_URL,
        {"action": "mark_correct", "_selected_action": [hit.pk, near.pk], "note": "checked again", "index": 0},
    )
    notes = set(DedupEvent.objects.for_tenant(hit.tenant).filter(pk__in=[hit.pk, near.pk]).values_list("review_note"))
    assert notes == {("checked again",)}

    # The detail form shows the note it saves: emptying it there is asked for, and clears it.
    client.post(_event_url(hit), {"review_verdict": "correct", "review_note": ""})
    assert DedupEvent.objects.for_tenant(hit.tenant).get(pk=hit.pk).review_note == ""


def test_a_review_note_the_form_refuses_is_named_and_nothing_changes(client, support_a, events_a):
    from django.contrib.messages import get_messages

    client.force_login(support_a)
    response = client.post(
        EVENTS_URL,
        {"action": "mark_incorrect", "_selected_action": [events_a["hit"].pk], "note": "a\x00b", "index": 0},
    )
    assert response.status_code == 302
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any(m.startswith("Review note:") and "Nothing was changed" in m for m in shown), shown
    assert not any("No action selected" in m for m in shown), shown
    assert DedupEvent.objects.for_tenant(events_a["hit"].tenant).get(pk=events_a["hit"].pk).review_verdict == (
        "unreviewed"
    )


def test_another_tenants_event_by_url_is_refused(client, admin_a, event_b):
    client.force_login(admin_a)
    response = client.get(_event_url(event_b))
    assert response.status_code == 302 and response.url == reverse("admin:index")
    response = client.post(_event_url(event_b), {"review_verdict": "incorrect", "review_note": "x"})
    assert response.status_code in (302, 403, 404)
    event_b.refresh_from_db()
    assert event_b.review_verdict == "unreviewed"


def test_nobody_adds_or_deletes_audit_events(client, admin_a, events_a):
    client.force_login(admin_a)
    assert client.get(reverse("admin:conversations_dedupevent_add")).status_code == 403
    event = events_a["hit"]
    assert (
        client.post(reverse("admin:conversations_dedupevent_delete", args=[event.pk]), {"post": "yes"}).status_code
        == 403
    )
    assert DedupEvent.objects.for_tenant(event.tenant).filter(pk=event.pk).exists()


def test_viewer_has_no_access_to_the_audit_log(client, tenant_a, events_a):
    client.force_login(user_with_role(tenant_a, Role.VIEWER))
    assert client.get(EVENTS_URL).status_code == 403
    assert client.get(DASHBOARD_URL).status_code == 403


def test_csv_export_of_the_filtered_list(client, support_a, events_a, event_b, tenant_a):
    formula = served_event(tenant_a, question='=HYPERLINK("http://evil")', matched_question="q", similarity=0.97)
    client.force_login(support_a)
    response = client.get(f"{EXPORT_URL}?action=served_cached&similarity_min=0.92")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert {int(row["id"]) for row in rows} == {events_a["hit"].pk, formula.pk}
    by_id = {int(row["id"]): row for row in rows}
    assert by_id[events_a["hit"].pk]["question"] == "How much is the pro plan?"
    assert by_id[events_a["hit"].pk]["matched_question"] == "What does pro cost?"
    assert by_id[formula.pk]["question"].startswith("'=")
    assert "tenant" not in rows[0]
    assert by_id[formula.pk]["pair_probability"] == "" and by_id[formula.pk]["match_passes_checks"] == ""

    refused = client.get(f"{EXPORT_URL}?similarity_min=abc")
    assert refused.status_code == 302 and refused.url == EVENTS_URL

    everything = client.get(EXPORT_URL)
    text = b"".join(everything.streaming_content).decode()
    assert "Tenant B private question" not in text
    assert len(list(csv.DictReader(io.StringIO(text)))) == 5


def test_csv_export_keeps_a_negative_similarity_a_number(client, support_a, tenant_a):
    """Cosine similarity may be below 0; the formula guard quoted "-0.0500" into the text "'-0.0500"."""
    unlike = DedupEventFactory(tenant=tenant_a, similarity=-0.05)
    formula = served_event(tenant_a, question="-2+3+cmd|' /C calc'!A0", matched_question="q", similarity=0.5)
    client.force_login(support_a)
    rows = {
        int(row["id"]): row
        for row in csv.DictReader(io.StringIO(b"".join(client.get(EXPORT_URL).streaming_content).decode()))
    }
    assert rows[unlike.pk]["similarity"] == "-0.0500"
    assert rows[formula.pk]["question"].startswith("'-2+3")


# --- dashboard ---------------------------------------------------------------------------------------------
def test_dashboard_figures_for_own_tenant(client, support_a, events_a, event_b):
    client.force_login(support_a)
    response = client.get(DASHBOARD_URL)
    assert response.status_code == 200
    totals = response.context["dashboard"].totals
    # events_a: 2 served (0.94, 0.91) and 2 answered, one of them 10 days ago (inside the default 30 days)
    assert (totals.turns, totals.hits, totals.reviewed_hits) == (4, 2, 0)
    assert response.context["hit_rate_display"] == "50.0%"
    assert response.context["false_hit_rate_display"] == "–"
    assert b"kb-dashboard-data" in response.content


def test_dashboard_period_and_false_hit_rate_follow_reviews(client, support_a, events_a, tenant_a):
    client.force_login(support_a)
    today = timezone.localdate().isoformat()
    client.post(_event_url(events_a["hit"]), {"review_verdict": "incorrect", "review_note": ""})
    client.post(_event_url(events_a["near"]), {"review_verdict": "correct", "review_note": ""})
    response = client.get(DASHBOARD_URL, {"tenant": tenant_a.pk, "start": today, "end": today})
    totals = response.context["dashboard"].totals
    assert (totals.turns, totals.reviewed_hits, totals.false_hits) == (3, 2, 1)
    assert response.context["false_hit_rate_display"] == "50.0%"
    current = [row for row in response.context["what_if_rows"] if row["is_current"]]
    assert current == [
        {
            "threshold_display": f"{DEFAULT_THRESHOLD:g}",
            "hits": 2,
            "false_hits": 1,
            "precision_display": "50.0%",
            "missed_repeats": 0,
            "is_current": True,
            "models": [],  # no verifier ran in shadow
        }
    ]


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        ("2026-03-10", "2026-03-01", "must not be before"),
        ("2020-01-01", "2026-01-01", "at most"),
        ("x", "y", "valid date"),
        ("2026-02-30", "2026-03-01", "valid date"),
        ("9999-12-01", "9999-12-31", "before 9999-12-31"),
    ],
)
def test_dashboard_bad_period_is_a_form_error(client, support_a, events_a, start, end, message):
    client.force_login(support_a)
    response = client.get(DASHBOARD_URL, {"start": start, "end": end})
    assert response.status_code == 200
    assert response.context["dashboard"] is None
    assert message in response.content.decode()


def test_dashboard_lists_the_policy_changes_of_the_period(client, admin_a, tenant_a, tenant_b, events_a):
    from conversations.admin.services import dedup_policy_change

    dedup_policy_change(tenant=tenant_a, user=admin_a, changes={"threshold": 0.87})
    dedup_policy_change(tenant=tenant_b, user=None, actor="someone at b", changes={"threshold": 0.5})
    client.force_login(admin_a)
    response = client.get(DASHBOARD_URL)
    assert [(c.field, c.new_value) for c in response.context["period_changes"]] == [("threshold", 0.87)]
    assert b"someone at b" not in response.content
    yesterday = (timezone.localdate() - timedelta(days=1)).isoformat()
    response = client.get(DASHBOARD_URL, {"start": yesterday, "end": yesterday})
    assert response.context["period_changes"] == []


def test_dashboard_of_another_tenant_is_404(client, admin_a, tenant_b, event_b):
    client.force_login(admin_a)
    assert client.get(DASHBOARD_URL, {"tenant": tenant_b.pk}).status_code == 404


def test_dashboard_marks_the_gate_the_decisions_apply_without_the_duplicate_head(
    client, support_a, events_a, tenant_a, settings
):
    """Without the head the decision raises its gate to at least 0.90 (the events record it): the histogram's line
    and the what-if table's current row showed the policy's 0.76 instead, a threshold no decision applied."""
    from conversations.dedup.decisions import HEADLESS_THRESHOLD_FLOOR

    settings.DUPLICATE_HEAD = False
    client.force_login(support_a)
    response = client.get(DASHBOARD_URL, {"tenant": tenant_a.pk})
    assert response.context["dashboard"].threshold == HEADLESS_THRESHOLD_FLOOR
    assert response.context["chart_data"]["histogram"]["threshold"] == HEADLESS_THRESHOLD_FLOOR
    current = [row["threshold_display"] for row in response.context["what_if_rows"] if row["is_current"]]
    assert current == [f"{HEADLESS_THRESHOLD_FLOOR:g}"]
    assert "the policy's 0.76, raised as the decisions run without the duplicate head" in response.content.decode()

    settings.DUPLICATE_HEAD = True
    response = client.get(DASHBOARD_URL, {"tenant": tenant_a.pk})
    assert response.context["dashboard"].threshold == DEFAULT_THRESHOLD


def test_without_the_duplicate_head_the_what_if_table_shows_no_threshold_the_gate_never_applies(
    client, support_a, events_a, tenant_a, settings
):
    """Without the head the decision never serves below HEADLESS_THRESHOLD_FLOOR, whatever the policy says: rows
    for 0.70 to 0.88 promised hits no decision could give. Only thresholds the gate can apply are listed then;
    with the head every candidate is."""
    from conversations.dedup.decisions import HEADLESS_THRESHOLD_FLOOR
    from conversations.models import DedupPolicy

    DedupPolicy.objects.for_tenant(tenant_a).update(threshold=0.8)
    client.force_login(support_a)
    settings.DUPLICATE_HEAD = False
    response = client.get(DASHBOARD_URL, {"tenant": tenant_a.pk})
    shown = [float(row["threshold_display"]) for row in response.context["what_if_rows"]]
    assert shown and min(shown) == HEADLESS_THRESHOLD_FLOOR, shown
    assert [row["threshold_display"] for row in response.context["what_if_rows"] if row["is_current"]] == ["0.9"]
    assert "never serve below 0.9" in response.content.decode()

    settings.DUPLICATE_HEAD = True
    response = client.get(DASHBOARD_URL, {"tenant": tenant_a.pk})
    shown = [float(row["threshold_display"]) for row in response.context["what_if_rows"]]
    assert min(shown) == 0.7 and 0.8 in shown
    assert "never serve below" not in response.content.decode()


@pytest.mark.parametrize(
    "query", ["similarity_max=nan", "similarity_min=NaN", "similarity_min=-inf&similarity_max=inf"]
)
def test_a_similarity_bound_that_is_not_a_number_is_refused(client, support_a, events_a, query):
    """float() reads "nan" and "inf": PostgreSQL orders NaN above every number, so "at most nan" listed (and
    exported, and bulk-reviewed) every event as if it were a bound, and "at least nan" none."""
    client.force_login(support_a)
    response = client.get(f"{EVENTS_URL}?{query}")
    assert response.status_code == 302 and "e=1" in response.url
    refused = client.get(f"{EXPORT_URL}?{query}")
    assert refused.status_code == 302 and refused.url == EVENTS_URL


def test_a_user_of_two_tenants_sees_which_tenant_each_event_and_exported_row_is_of(
    client, support_a, events_a, event_b, tenant_b
):
    """The list and the CSV named the tenant only for superusers: support in two tenants got both tenants' events
    mixed, with nothing to tell a row of one from a row of the other."""
    from tests.factories import MembershipFactory

    MembershipFactory(user=support_a, tenant=tenant_b, role=Role.SUPPORT)
    client.force_login(support_a)
    response = client.get(EVENTS_URL)
    assert _listed(response) == {event.pk for event in events_a.values()} | {event_b.pk}
    assert "tenant" in response.context["cl"].list_display
    rows = list(csv.DictReader(io.StringIO(b"".join(client.get(EXPORT_URL).streaming_content).decode())))
    tenant_of = {int(row["id"]): row["tenant"] for row in rows}
    assert tenant_of[event_b.pk] == tenant_b.slug
    assert tenant_of[events_a["hit"].pk] == events_a["hit"].tenant.slug
    assert "tenant" in client.get(HISTORY_URL).context["cl"].list_display


def test_the_dashboards_audit_log_link_opens_the_events_of_its_tenant_and_period(
    client, support_a, events_a, event_b, tenant_a, tenant_b
):
    """After a switch to another tenant (or period) in the page, "Audit log" opened every event of every tenant the
    user works in, not the ones the figures were computed from."""
    from tests.factories import MembershipFactory

    MembershipFactory(user=support_a, tenant=tenant_b, role=Role.SUPPORT)
    client.force_login(support_a)
    today = timezone.localdate().isoformat()
    response = client.get(DASHBOARD_URL, {"tenant": tenant_b.pk, "start": today, "end": today})
    listed = client.get(response.context["events_url"])
    assert listed.status_code == 200
    assert _listed(listed) == {event_b.pk}
    response = client.get(DASHBOARD_URL, {"tenant": tenant_a.pk, "start": today, "end": today})
    listed = _listed(client.get(response.context["events_url"]))
    assert listed == {event.pk for name, event in events_a.items() if name != "old"}
    assert response.context["dashboard"].totals.turns == len(listed)


def test_the_dashboard_shows_the_threshold_as_the_what_if_table_does(client, admin_a, tenant_a, events_a):
    """A threshold set through the API need not be a multiple of 0.01: 0.855 was shown as "0.86" above the
    histogram and on its line, which was drawn at 0.855, beside a what-if row marked current at 0.855."""
    from conversations.admin.services import dedup_policy_change

    dedup_policy_change(tenant=tenant_a, user=admin_a, changes={"threshold": 0.855})
    client.force_login(admin_a)
    response = client.get(DASHBOARD_URL)
    current = [row["threshold_display"] for row in response.context["what_if_rows"] if row["is_current"]]
    assert current == ["0.855"]
    assert "with the current threshold (0.855)" in response.content.decode()
    assert response.context["chart_data"]["histogram"]["threshold_label"] == "0.855"
