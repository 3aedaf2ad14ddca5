from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tenants.selectors import api_key_get_by_raw


class Command(BaseCommand):
    help = "Print 'valid' when KEY is an active key of an active tenant, else 'invalid'."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key")

    def handle(self, *args: Any, **options: Any) -> None:
        api_key = api_key_get_by_raw(raw_key=options["key"])
        ok = api_key is not None and api_key.revoked_at is None and api_key.tenant.is_active
        self.stdout.write("valid" if ok else "invalid")
