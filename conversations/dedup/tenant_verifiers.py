"""Loading a tenant's trained duplicate verifiers, the ones a turn decides with.

Guarantees:
- a version's file lives at `verifier_path(tenant, version)`, derived from the tenant, never read from a row;
- the loader takes the tenant, refuses a row of another tenant, reads only that tenant's path, and checks that the
  file names the same tenant and version: no tenant's model ever decides for another;
- a missing or unreadable file logs an error and the shipped head decides (never a failed turn);
- a model is read once per process per version (`_models`, keyed by tenant and version).

It sits under the turn (which loads the verifiers with the tenant's settings) and under training (which writes the
files and activates versions), so neither reaches up into the other.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from django.conf import settings

from conversations.dedup import decisions
from conversations.dedup.duplicate_model import PairModel, pair_model_from_dict
from conversations.models import DuplicateModelStatus, DuplicateModelVersion
from tenants.models import Tenant

logger = logging.getLogger(__name__)


def verifier_path(*, tenant: Tenant, version: int) -> Path:
    """Where version `version` of `tenant`'s verifier lives: derived from the tenant's id, never read from a row."""
    return Path(settings.DUPLICATE_MODEL_DIR) / f"tenant-{int(tenant.pk)}" / f"v{int(version)}.json"


def verifier_label(version: int) -> str:
    return f"tenant model v{version}"


# (tenant id, version row id) -> model, per process: a version's file never changes once written.
_models: dict[tuple[int, int], PairModel] = {}


def verifier_load(*, tenant: Tenant, row: DuplicateModelVersion) -> decisions.Verifier:
    """The verifier of `row`, a version of `tenant`. Raises ValueError for a row of another tenant and OSError or
    ValueError for a file that is missing, unreadable, or names another tenant or version."""
    if row.tenant_id != tenant.pk:
        raise ValueError(f"verifier version {row.pk} is not tenant {tenant.pk}'s")
    key = (tenant.pk, row.pk)
    model = _models.get(key)
    if model is None:
        path = verifier_path(tenant=tenant, version=row.version)
        payload = json.loads(path.read_text(encoding="utf-8"))
        if payload.get("tenant_id") != tenant.pk or payload.get("version") != row.version:
            raise ValueError(f"{path} names tenant {payload.get('tenant_id')} v{payload.get('version')}")
        model = pair_model_from_dict(payload)
        _models[key] = model
    return decisions.Verifier(version_id=row.pk, label=verifier_label(row.version), model=model)


def tenant_verifiers_load(*, tenant: Tenant, embedding_model: str) -> decisions.TenantVerifiers:
    """The tenant's active verifier and shadow candidate of `embedding_model` (by name): the ones that decide the
    conversations of that model's knowledge bases. A file that cannot be read is logged as an error and left out: the
    shipped head decides instead of an active model, and no shadow runs instead of a shadow one."""
    rows = {
        row.status: row
        for row in DuplicateModelVersion.objects.for_tenant(tenant).filter(
            embedding_model=embedding_model, status__in=(DuplicateModelStatus.ACTIVE, DuplicateModelStatus.SHADOW)
        )
    }
    loaded: dict[str, decisions.Verifier | None] = {}
    for status, row in rows.items():
        try:
            loaded[status] = verifier_load(tenant=tenant, row=row)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.error(
                "tenant %s: verifier v%s of %s (%s) cannot be loaded, %s: %s",
                tenant.pk,
                row.version,
                embedding_model,
                status,
                "the shipped head decides" if status == DuplicateModelStatus.ACTIVE else "no shadow runs",
                exc,
            )
    return decisions.TenantVerifiers(
        active=loaded.get(DuplicateModelStatus.ACTIVE) or decisions.Verifier(),
        shadow=loaded.get(DuplicateModelStatus.SHADOW),
    )
