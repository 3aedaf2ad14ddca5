"""The admin index's links to the conversations app's own pages, each shown only to a user whose role in some tenant
opens it (the pages check again, per tenant)."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

from conversations.admin.playground import PLAYGROUND_ROLES
from conversations.admin.views import DASHBOARD_ROLES, SETTINGS_ROLES
from tenants.admin_scoping import request_tenant_roles

register = template.Library()

PAGES = (
    (
        "kb-link-playground",
        "Playground",
        "admin:conversations_conversation_playground",
        PLAYGROUND_ROLES,
        "Chat with a knowledge base and test its retrieval.",
    ),
    (
        "kb-link-dashboard",
        "Dedup dashboard",
        "admin:conversations_dedupevent_dashboard",
        DASHBOARD_ROLES,
        "Savings, hit rates and the similarity histogram.",
    ),
    (
        "kb-link-settings",
        "Dedup settings",
        "admin:conversations_deduppolicy_settings",
        SETTINGS_ROLES,
        "Threshold, scope, exclusion and intents.",
    ),
)


@register.simple_tag(takes_context=True)
def kb_admin_pages(context: dict[str, Any]) -> list[dict[str, str]]:
    request = context["request"]
    roles = set(request_tenant_roles(request).values())
    return [
        {"id": link_id, "name": name, "url": reverse(url_name), "help": help_text}
        for link_id, name, url_name, allowed, help_text in PAGES
        if request.user.is_superuser or roles & set(allowed)
    ]
