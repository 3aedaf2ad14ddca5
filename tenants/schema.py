"""The OpenAPI schema names the API key scope each operation needs, from the same declaration the permission
checks (`TenantApi.required_scope`): in its description, as `x-required-scope`, and in what its 403 means."""

from __future__ import annotations

from typing import Any

from kbplatform.schema import KbAutoSchema
from tenants.scopes import ANY_SCOPE, Scope, scope_need_text, scope_required, scopes_accepted


class ScopedAutoSchema(KbAutoSchema):
    def get_operation(self, *args: Any, **kwargs: Any) -> dict | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is None or not hasattr(self.view, "required_scope"):
            return operation
        needed = scope_required(self.view.required_scope, self.method)
        if needed is None:
            return operation
        accepted = [str(scope) for scope in scopes_accepted(needed)]
        if needed == ANY_SCOPE:
            operation["x-required-scope"] = ANY_SCOPE
            note = "Any API key may call this, whatever its scopes."
        else:
            # The least scope that is enough; x-accepted-scopes lists every one that is.
            operation["x-required-scope"] = accepted[0]
            operation["x-accepted-scopes"] = accepted
            named = scope_need_text(needed).replace('"', "`")
            note = f"Needs an API key with the {named} scope" + (
                "." if accepted == [Scope.ADMIN] else " (or `admin`, which holds every scope)."
            )
            operation.setdefault("responses", {})["403"] = {
                "description": f"The key lacks the {scope_need_text(needed)} scope: `extra.required_scope` names the "
                "least one that would do, `extra.accepted_scopes` every one, and `extra.key_scopes` what the key "
                "holds (or the key is limited to another knowledge base)."
            }
        description = operation.get("description", "")
        operation["description"] = f"{description}\n\n{note}" if description else note
        return operation
