"""The `--tenant SLUG` option the knowledge-base commands share: every tenant, or the one the slug names."""

from __future__ import annotations

from django.core.management.base import CommandError, CommandParser
from django.db.models import QuerySet

from tenants.models import Tenant


def tenant_option_add(parser: CommandParser) -> None:
    parser.add_argument("--tenant", help="Only this tenant's knowledge bases (its slug).")


def tenants_chosen(slug: str | None) -> QuerySet[Tenant]:
    """Every tenant in id order, or the one `slug` names; a slug no tenant has is a CommandError."""
    tenants = Tenant.objects.order_by("pk")
    if not slug:
        return tenants
    tenants = tenants.filter(slug=slug)
    if not tenants.exists():
        raise CommandError(f"No tenant with slug {slug!r}.")
    return tenants
