from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured


class TenantsConfig(AppConfig):
    name = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        rate_limits_validate()
        from django.contrib import admin

        from tenants import checks  # noqa: F401  (registers the scope declaration check)
        from tenants.admin_login import ThrottledAdminAuthenticationForm

        admin.site.login_form = ThrottledAdminAuthenticationForm


def rate_limits_validate() -> None:
    """Refuse to start with a rate limit that does not parse (KB_RATE_LIMIT, KB_RATE_LIMIT_TENANTS,
    KB_AUTH_FAILURE_RATE, KB_UNAUTHENTICATED_RATE, KB_ADMIN_LOGIN_FAILURE_RATE), instead of failing every request
    later: a typo in a limit is found when the process starts, by whoever deploys it."""
    from django.conf import settings

    from tenants.throttling import rate_parse

    limits = {
        "KB_RATE_LIMIT": settings.RATE_LIMIT_DEFAULT,
        "KB_AUTH_FAILURE_RATE": settings.AUTH_FAILURE_RATE,
        "KB_UNAUTHENTICATED_RATE": settings.UNAUTHENTICATED_RATE,
        "KB_ADMIN_LOGIN_FAILURE_RATE": settings.ADMIN_LOGIN_FAILURE_RATE,
    }
    limits.update({f"KB_RATE_LIMIT_TENANTS[{slug}]": text for slug, text in settings.RATE_LIMIT_TENANTS.items()})
    for name, text in limits.items():
        try:
            rate_parse(text, burst=settings.RATE_LIMIT_BURST)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {exc}") from exc
