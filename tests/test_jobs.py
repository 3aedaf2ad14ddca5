"""Services queue their app's tasks by registered name (`kbplatform.jobs`), so no service imports a tasks module."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.db import transaction

from kbplatform import jobs


def test_a_task_is_found_by_its_registered_name_in_a_process_that_never_imported_its_module():
    # A fresh interpreter, as a web process is: Django set up, no tasks module imported yet.
    code = (
        "import sys, django; django.setup()\n"
        "assert 'conversations.tasks' not in sys.modules\n"
        "from kbplatform.jobs import task_get\n"
        "print(task_get('conversations.question_index_backfill').name, 'conversations.tasks' in sys.modules)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "kbplatform.settings.base"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["conversations.question_index_backfill", "True"]


def test_a_name_no_app_registers_is_refused_in_the_caller():
    with pytest.raises(KeyError):
        jobs.task_get("conversations.no_such_task")
    with pytest.raises(KeyError):
        jobs.task_enqueue_on_commit("no_such_task", 1)


@pytest.mark.django_db(transaction=True)
def test_a_task_is_sent_after_commit_with_its_arguments_and_not_after_a_rollback(monkeypatch):
    task = jobs.task_get("conversations.question_index_backfill")
    sent = []
    monkeypatch.setattr(task, "delay", lambda *args, **kwargs: sent.append((args, kwargs)))
    with transaction.atomic():
        jobs.task_enqueue_on_commit("conversations.question_index_backfill", 7, turn_ids=[1, 2])
        assert sent == []  # not before the commit
    assert sent == [((7,), {"turn_ids": [1, 2]})]
    try:
        with transaction.atomic():
            jobs.task_enqueue_on_commit("conversations.question_index_backfill", 8)
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert sent == [((7,), {"turn_ids": [1, 2]})]


@pytest.mark.django_db(transaction=True)
def test_a_broker_that_refuses_does_not_undo_the_committed_write(monkeypatch, caplog):
    task = jobs.task_get("conversations.question_index_backfill")

    def refuse(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(task, "delay", refuse)
    with transaction.atomic():
        jobs.task_enqueue_on_commit("conversations.question_index_backfill", 7)
    assert "broker down" in caplog.text
