"""Queueing an app's Celery task from its services, by the task's registered name.

A service that queues work for a worker does not import its app's tasks module: that module imports the services, so
the import would be a cycle. The service names the task instead (the `name=` of its `@shared_task`), and this module
finds it in the Celery app's registry.

Guarantees:
- the task found is the registered task object, so eager mode (no broker), retries and the task's options apply as if
  it had been imported; the apps' tasks modules are imported on first need, as a worker imports them at start;
- a name no app registers raises `KeyError` in the caller, before anything is committed: never a message that no
  worker consumes;
- `task_enqueue_on_commit` sends after the surrounding transaction commits (at once outside one), and a broker that
  refuses is logged, not raised: the committed write stands, as with `transaction.on_commit(..., robust=True)`.
"""

from __future__ import annotations

from typing import Any

from celery import Task
from django.db import transaction

from kbplatform.celery import app


def task_get(name: str) -> Task:
    """The registered Celery task `name`; raises KeyError when no app registers it."""
    if name not in app.tasks:
        app.loader.import_default_modules()  # the apps' tasks modules (autodiscovery), once per process
    return app.tasks[name]


def task_enqueue_on_commit(name: str, *args: Any, **kwargs: Any) -> None:
    """Queue task `name` with these arguments once the current transaction commits."""
    task = task_get(name)
    transaction.on_commit(lambda: task.delay(*args, **kwargs), robust=True)
