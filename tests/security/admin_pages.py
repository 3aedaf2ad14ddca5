"""The project's admin pages (custom views included) that take no object id, found by walking the URL conf, so
a page added later is covered by the tests that use this without anyone listing it."""

from __future__ import annotations

import re

from django.urls import URLPattern, URLResolver, get_resolver


def admin_pages_without_ids(*, skip: str = r"logout|password") -> list[str]:
    """Paths under /admin/ with no URL parameter, minus those whose route matches the `skip` pattern."""
    pages: list[str] = []

    def walk(patterns, prefix: str) -> None:  # noqa: ANN001
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                route = prefix + str(pattern.pattern)
                if route.startswith("admin/") and "<" not in route and not re.search(skip, route):
                    pages.append("/" + route)

    walk(get_resolver().url_patterns, "")
    return pages
