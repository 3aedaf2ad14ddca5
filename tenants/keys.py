"""API key format and hashing: pure functions, no I/O.

A key reads `kb_<prefix>_<secret>`: `prefix` (8 characters) is stored in clear to find the row and to show
people which key is which; the whole key is stored only as its SHA-256 hex digest.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX_LENGTH = 8
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
_PREFIX_CHARACTERS = frozenset(_ALPHABET)


def key_generate() -> tuple[str, str]:
    """Return (prefix, whole key)."""
    prefix = "".join(secrets.choice(_ALPHABET) for _ in range(KEY_PREFIX_LENGTH))
    return prefix, f"kb_{prefix}_{secrets.token_urlsafe(32)}"


def key_hash(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode("utf-8")).hexdigest()


def key_prefix(raw_key: str) -> str | None:
    """The prefix of a well-formed key, else None. Only characters keys are made of pass: anything else (a NUL,
    which PostgreSQL refuses in a query) cannot name a key and never reaches the database."""
    parts = raw_key.split("_", 2)
    if len(parts) != 3 or parts[0] != "kb" or len(parts[1]) != KEY_PREFIX_LENGTH or not parts[2]:
        return None
    if not set(parts[1]) <= _PREFIX_CHARACTERS:
        return None
    return parts[1]


def key_matches(raw_key: str, hashed_key: str) -> bool:
    return hmac.compare_digest(key_hash(raw_key), hashed_key)
