"""Fixtures shared by the security tests."""

from __future__ import annotations

import json
import logging

import pytest
from django.core import signals
from django.db import close_old_connections


@pytest.fixture
def refusals(caplog):
    """The `refusal` lines logged so far, parsed: what a log store would receive."""
    caplog.set_level(logging.WARNING, logger="kbplatform.refusals")

    def lines() -> list[dict]:
        return [
            json.loads(record.getMessage().removeprefix("refusal "))
            for record in caplog.records
            if record.name == "kbplatform.refusals"
        ]

    return lines


@pytest.fixture
def in_process_wsgi(db):
    """Keep the test's database connection open across WSGI calls, as Django's test client does: the request
    signals would otherwise close it (and with it the test's transaction) after every request."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)
