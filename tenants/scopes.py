"""What an API key may do: its scopes, and the pure decisions about them (no I/O).

- `chat`: conversations, their messages and turns, feedback, search, and reading the knowledge bases the key
  reaches; the audit log without the policy's settings.
- `ingest`: the documents, bulk uploads and chunks of the knowledge bases the key reaches: create, list, read,
  edit, delete and re-index documents; and listing and reading those knowledge bases, so an uploader can find
  where to upload and follow its state. Never changing a knowledge base itself (create, change, delete, re-index).
- `admin`: everything, keys, the dedup policy, knowledge bases and the audit log with the policy's settings and
  its review included.

A key holds one or more of them. Every API view declares what each of its methods needs (`TenantApi.required_scope`)
and one permission enforces it; what a key is created with when none is named is `chat` alone, the least a key can
do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, TypeAlias

from django.db import models


class Scope(models.TextChoices):
    CHAT = "chat", "Chat (conversations, feedback, search)"
    INGEST = "ingest", "Ingest (documents and chunks)"
    ADMIN = "admin", "Admin (everything: keys, policy, knowledge bases)"


# A method every valid key may call whatever its scopes (who am I). Declared, like a scope, so that a method without
# a declaration is still refused.
ANY_SCOPE: Final = "any"
DEFAULT_SCOPES: Final = frozenset({Scope.CHAT})
# The order scopes are listed in (responses, the admin): from the least to the most a key can do.
SCOPE_ORDER: Final = (Scope.CHAT, Scope.INGEST, Scope.ADMIN)

# Reading the knowledge bases a key reaches: what a chat client and an uploader both need.
KNOWLEDGE_BASE_READ: Final = frozenset({Scope.CHAT, Scope.INGEST})

# A scope, ANY_SCOPE, or a set of scopes of which a key must hold one.
ScopeNeed: TypeAlias = Scope | str | frozenset[Scope]
# What a view says its methods need: one for all of them, or per method ("GET", "POST"...); None is nothing declared.
ScopeDeclaration: TypeAlias = ScopeNeed | Mapping[str, ScopeNeed] | None


class UnknownScopeError(ValueError):
    def __init__(self, names: list[str]) -> None:
        self.names = names
        known = ", ".join(SCOPE_ORDER)
        super().__init__(f"Unknown scope {', '.join(repr(n) for n in names)}: use {known}.")


def scopes_resolve(named: Iterable[str] | None) -> frozenset[Scope]:
    """The scopes a key gets for the names asked for: those, or `chat` alone when none is named (least privilege).
    An unknown name is refused rather than dropped, so a typo never makes a key quietly weaker or stronger."""
    names = list(named or ())
    unknown = sorted({name for name in names if name not in Scope.values})
    if unknown:
        raise UnknownScopeError(unknown)
    return frozenset(Scope(name) for name in names) or DEFAULT_SCOPES


def scopes_sorted(scopes: Iterable[str]) -> list[str]:
    held = set(scopes)
    return [str(scope) for scope in SCOPE_ORDER if scope in held]


def scope_required(declaration: ScopeDeclaration, method: str) -> ScopeNeed | None:
    """What `method` of a view with this declaration needs, or None when the view declares nothing for it (which
    the permission refuses). One scope declared for the view covers every method; a mapping names each method.
    HEAD is answered as GET; OPTIONS (which shows no tenant data) needs only a valid key."""
    method = method.upper()
    if method == "OPTIONS":
        return ANY_SCOPE
    if declaration is None:
        return None
    if isinstance(declaration, Mapping):
        return declaration.get("GET" if method == "HEAD" else method)
    return declaration


def scope_missing(*, held: Iterable[str], needed: ScopeNeed) -> Scope | None:
    """The scope a key lacks for what `needed` says, or None when it may go ahead: for a set of scopes, the least
    of them (`SCOPE_ORDER`), which is the one to give the key. `admin` holds every other scope."""
    held = set(held)
    accepted = scopes_accepted(needed)
    if not accepted or Scope.ADMIN in held or held & set(accepted):
        return None
    return accepted[0]


def scopes_accepted(needed: ScopeNeed) -> list[Scope]:
    """The scopes any one of which is enough for `needed`, least first, `admin` last; empty for ANY_SCOPE."""
    if needed == ANY_SCOPE:
        return []
    named = set(needed) if isinstance(needed, frozenset) else {Scope(needed)}
    return [scope for scope in SCOPE_ORDER if scope in named or scope == Scope.ADMIN]


def scope_need_text(needed: ScopeNeed) -> str:
    """`needed` as a message says it: '"chat"', or '"chat" or "ingest"' (admin, which holds all, left unsaid)."""
    named = [scope for scope in scopes_accepted(needed) if scope != Scope.ADMIN] or [Scope.ADMIN]
    return " or ".join(f'"{scope}"' for scope in named)
