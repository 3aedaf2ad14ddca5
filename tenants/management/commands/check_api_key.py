from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tenants.scopes import Scope, scope_missing
from tenants.selectors import api_key_get_by_raw


class Command(BaseCommand):
    help = "Print 'valid' when KEY is an active key of an active tenant holding every --scope named, else 'invalid'."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key")
        parser.add_argument(
            "--scope", action="append", choices=Scope.values, default=[], help="A scope the key must hold (repeat)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        api_key = api_key_get_by_raw(raw_key=options["key"])
        ok = api_key is not None and api_key.revoked_at is None and api_key.tenant.is_active
        if ok:
            ok = all(scope_missing(held=api_key.scopes, needed=scope) is None for scope in options["scope"])
        self.stdout.write("valid" if ok else "invalid")
