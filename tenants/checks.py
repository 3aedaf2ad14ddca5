"""`manage.py check` (and the test suite) refuses an API that does not say what every endpoint needs of a key."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.core import checks
from django.urls import URLPattern, URLResolver, get_resolver

from tenants.scopes import ANY_SCOPE, Scope, scope_required

API_PREFIX = "api/v1/"


def api_views(patterns: list | None = None, prefix: str = "") -> Iterator[tuple[str, type]]:
    """(route, view class) of every URL pattern under /api/v1/, from the URLconf itself."""
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            yield from api_views(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            route = prefix + str(pattern.pattern)
            view = getattr(pattern.callback, "cls", None) or getattr(pattern.callback, "view_class", None)
            if route.startswith(API_PREFIX):
                yield route, view


def view_methods(view: type) -> list[str]:
    """The HTTP methods a view answers with a handler of its own (OPTIONS and HEAD follow from them)."""
    return [m.upper() for m in view.http_method_names if m not in ("options", "head") and hasattr(view, m)]


def scope_declaration_problems(route: str, view: type | None) -> list[str]:
    from tenants.api import TenantApi

    if view is None or not issubclass(view, TenantApi):
        return [f"/{route} is not a TenantApi view, so nothing checks its API key scopes."]
    problems = []
    for method in view_methods(view):
        needed = scope_required(view.required_scope, method)
        if needed is None:
            problems.append(f"{method} /{route} ({view.__qualname__}) declares no required_scope.")
        elif needed != ANY_SCOPE and not _scopes_known(needed):
            problems.append(f"{method} /{route} ({view.__qualname__}) declares an unknown scope {needed!r}.")
    return problems


def _scopes_known(needed: object) -> bool:
    named = needed if isinstance(needed, frozenset) else {needed}
    return bool(named) and all(isinstance(scope, str) and scope in Scope.values for scope in named)


@checks.register(checks.Tags.security)
def api_scopes_declared(app_configs: Any = None, **kwargs: Any) -> list[checks.Error]:
    return [
        checks.Error(problem, hint="Set required_scope on the view (tenants.api.TenantApi).", id="tenants.E001")
        for route, view in api_views()
        for problem in scope_declaration_problems(route, view)
    ]
