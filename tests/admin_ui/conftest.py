from __future__ import annotations

import pytest

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

PASSWORD = "pass-word-123"  # UserFactory's password


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
