"""/api/docs/ in headless Chromium with every request to another host aborted: Swagger UI comes from the platform's
own static files (drf-spectacular-sidecar), so the page lists the API's operations with no internet."""

from __future__ import annotations

import pytest
from django.urls import reverse

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_api_docs_render_their_operations_offline(page, live_server):
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))

    response = page.goto(reverse("api-docs"))
    assert response.status == 200
    # Swagger UI drew the schema it fetched from /api/schema/: the operations, grouped by tag.
    page.wait_for_selector(".opblock-summary-path", timeout=20_000)
    paths = set(page.locator(".opblock-summary-path").all_inner_texts())
    assert "/api/v1/conversations/{conversation_id}/messages/" in {path.replace("\u200b", "") for path in paths}
    assert page.locator(".opblock").count() >= 20

    assert page.aborted == []
    assert all(url.startswith(live_server.url) for url in requested), requested
    assert any("/static/drf_spectacular_sidecar/swagger-ui-dist/" in url for url in requested), requested
