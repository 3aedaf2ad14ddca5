"""One structured log line for every request the API refuses (401, 403, 404 and 429), and for the admin's failed
sign-ins and refused pages.

Security review reads these: a burst of 404s from one key on ids it does not own is someone walking another
tenant's ids; 401s name the key prefix that failed (never the secret); 429s show who hit their limit. Each line
is `refusal {json}` on the `kbplatform.refusals` logger, and the same fields ride on the record as `refusal`
for handlers that ship structured records. Admin lines also carry `account`: the signed-in user, or the account
a failed sign-in named when such an account exists.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from tenants.keys import key_prefix

logger = logging.getLogger("kbplatform.refusals")

REFUSAL_STATUSES = frozenset({401, 403, 404, 429})
ADMIN_PREFIX = "/admin/"


def _claimed_prefix(request: Any) -> str | None:
    """The prefix of the key the client sent, when it is well formed: lets a 401 be traced to a key."""
    header = request.META.get("HTTP_AUTHORIZATION", "") if hasattr(request, "META") else ""
    _, _, raw_key = header.partition(" ")
    return key_prefix(raw_key.strip()) if raw_key else None


def refusal_log(*, request: Any, status_code: int, message: str, account: str | None = None) -> None:
    """Log one refusal; a failure to describe the request never turns the refusal into an error."""
    if status_code not in REFUSAL_STATUSES or request is None:
        return
    try:
        api_key = getattr(request, "auth", None)
        tenant = getattr(api_key, "tenant", None)
        record = {
            "status": status_code,
            "reason": message[:200],
            "method": request.method,
            "path": request.path[:300],
            "tenant": getattr(tenant, "slug", None),
            "key_prefix": getattr(api_key, "prefix", None) or _claimed_prefix(request),
            "remote_addr": request.META.get("REMOTE_ADDR"),
        }
        if account is not None or request.path.startswith(ADMIN_PREFIX):
            user = getattr(request, "user", None)
            record["account"] = account or (user.get_username() if user is not None and user.is_authenticated else None)
    except Exception:  # logging must not fail the response
        logger.warning("refusal status=%s (request could not be described)", status_code, exc_info=True)
        return
    logger.warning("refusal %s", json.dumps(record, sort_keys=True), extra={"refusal": record})
