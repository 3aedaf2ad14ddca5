from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.urls import reverse

from tenants.models import Role
from tests.factories import (
    DedupEventFactory,
    DedupPolicyFactory,
    IntentFactory,
    MembershipFactory,
    TenantFactory,
    TurnFactory,
    UserFactory,
)
from tests.services import ROOT, service_missing

PASSWORD = "pass-word-123"  # UserFactory's password


# --- the browser: Debian's chromium driven by Playwright, against the live test server -----------------------------
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = ROOT / "docs" / "screenshots"


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        service_missing("Chromium", f"{CHROMIUM} is missing (make test installs Debian's chromium package)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread while the browser is open; the ORM
    # calls the tests (and the database teardown) make around it are plain synchronous ones, so Django's
    # guard against ORM use inside async code does not apply to them.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--no-sandbox", "--disable-background-networking", "--disable-gpu"],
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(viewport={"width": 1400, "height": 900}, base_url=live_server.url)
    tab = context.new_page()
    # Nothing may be fetched from outside the test server (no CDN): any other host fails the request, and
    # `page.aborted` lists what was asked of one.
    tab.aborted = []

    def abort(route) -> None:
        tab.aborted.append(route.request.url)
        route.abort()

    context.route(re.compile(r"^(?!" + re.escape(live_server.url) + ").*"), abort)
    yield tab
    context.close()


@pytest.fixture
def screenshot_dir(tmp_path) -> Path:
    if os.environ.get("KB_SAVE_SCREENSHOTS"):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return SCREENSHOTS
    return tmp_path


def login(page, user) -> None:
    page.goto(reverse("admin:login"))
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(r"/admin/$"))


@pytest.fixture
def tenant_a(db):
    tenant = TenantFactory(slug="tenant-a", name="Tenant A")
    DedupPolicyFactory(tenant=tenant)
    IntentFactory(tenant=tenant, name="pricing", examples=["how much does it cost"])
    IntentFactory(tenant=tenant, name="greeting", behaviour="smalltalk", examples=["hello"], is_builtin=True)
    return tenant


@pytest.fixture
def tenant_b(db):
    tenant = TenantFactory(slug="tenant-b", name="Tenant B")
    DedupPolicyFactory(tenant=tenant)
    IntentFactory(tenant=tenant, name="secret-intent-of-b", examples=["b only"])
    return tenant


def user_with_role(tenant, role: str, username: str | None = None):
    user = UserFactory(**({"username": username} if username else {}))
    MembershipFactory(user=user, tenant=tenant, role=role)
    return user


@pytest.fixture
def admin_a(tenant_a):
    return user_with_role(tenant_a, Role.ADMIN, "admin-a@example.com")


@pytest.fixture
def support_a(tenant_a):
    return user_with_role(tenant_a, Role.SUPPORT, "support-a@example.com")


@pytest.fixture
def admin_b(tenant_b):
    return user_with_role(tenant_b, Role.ADMIN, "admin-b@example.com")


def served_event(tenant, *, question: str, matched_question: str, similarity: float, **fields):
    """A served_cached event with its turn and the earlier turn it matched, in one conversation."""
    matched = TurnFactory(tenant=tenant, question=matched_question, answer=f"Stored answer to: {matched_question}")
    turn = TurnFactory(
        tenant=tenant,
        conversation=matched.conversation,
        question=question,
        answer=matched.answer,
        decision="served_cached",
        similarity=similarity,
        matched_turn=matched,
    )
    fields.setdefault("action", "served_cached")
    return DedupEventFactory(
        tenant=tenant,
        turn=turn,
        matched_turn=matched,
        matched_turn_ref=matched.pk,
        similarity=similarity,
        **fields,
    )
