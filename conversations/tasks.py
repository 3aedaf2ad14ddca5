"""Beat tasks of the conversations app: thin, idempotent, one service call each."""

from __future__ import annotations

from celery import shared_task

from conversations.services import conversations_purge_expired


@shared_task(name="conversations.purge_expired", acks_late=True)
def conversations_purge_expired_task() -> int:
    """Delete expired conversations; running twice deletes nothing more."""
    return conversations_purge_expired()
