"""A tenant's trained verifier version made without training: its file is a shipped head's, as training writes one."""

from __future__ import annotations

import json

from conversations.dedup.duplicate_model import head_path
from conversations.dedup.tenant_verifiers import verifier_path
from conversations.models import DuplicateModelStatus, DuplicateModelVersion
from conversations.training.verifiers import duplicate_model_version_create
from retrieval.embeddings import BUNDLED_MODEL_NAME
from tenants.models import Tenant


def trained_version(
    tenant: Tenant, *, model: str = BUNDLED_MODEL_NAME, cut: float | None = None
) -> DuplicateModelVersion:
    """A candidate version of `tenant`'s verifier of `model` whose file holds that model's shipped head (with another
    cut when given), at the path the loader derives from the tenant and version."""
    row = duplicate_model_version_create(tenant=tenant, embedding_model=model, source="test")
    payload = json.loads(head_path(model).read_text())
    payload.update(tenant_id=tenant.pk, version=row.version, cut=cut if cut is not None else payload["cut"])
    path = verifier_path(tenant=tenant, version=row.version)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))
    DuplicateModelVersion.objects.for_tenant(tenant).filter(pk=row.pk).update(status=DuplicateModelStatus.CANDIDATE)
    return DuplicateModelVersion.objects.for_tenant(tenant).get(pk=row.pk)
