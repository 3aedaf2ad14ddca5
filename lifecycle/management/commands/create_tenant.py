from __future__ import annotations

import secrets
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import ValidationError
from django.db import transaction

from lifecycle.services import tenant_get_or_create
from tenants.models import slug_validator
from tenants.scopes import SCOPE_ORDER, Scope
from tenants.services import api_key_create, tenant_admin_user_ensure


class Command(BaseCommand):
    help = "Create (or find) a tenant, optionally its admin user, and print a new API key alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default=None)
        parser.add_argument("--admin-email", default=None, help="Create or find this user and make them tenant admin.")
        parser.add_argument("--admin-password", default=None, help="Set this password (else a random one is printed).")
        parser.add_argument("--key-name", default="default")
        parser.add_argument(
            "--key-scope",
            action="append",
            choices=Scope.values,
            dest="key_scopes",
            help="A scope of the new key (give it once per scope). Default: all of them (chat, ingest, admin), as the "
            "tenant's first key must be able to create the others.",
        )
        parser.add_argument("--no-key", action="store_true", help="Do not create an API key.")

    def handle(self, *args: Any, **options: Any) -> None:
        slug = options["slug"]
        try:
            slug_validator(slug)
        except ValidationError as exc:
            raise CommandError(f"Bad slug {slug!r}: {exc.messages[0]}") from exc
        with transaction.atomic():
            tenant, created = tenant_get_or_create(slug=slug, name=options["name"])
            self.stdout.write(f"{'Created' if created else 'Found'} tenant {tenant.slug} ({tenant.name})")
            if options["admin_email"]:
                password = options["admin_password"] or secrets.token_urlsafe(12)
                tenant_admin_user_ensure(tenant=tenant, email=options["admin_email"], password=password)
                self.stdout.write(f"Admin login: {options['admin_email']} / {password}")
            if options["no_key"]:
                return
            _, raw_key = api_key_create(
                tenant=tenant, name=options["key_name"], scopes=options["key_scopes"] or SCOPE_ORDER
            )
        self.stdout.write(raw_key)
