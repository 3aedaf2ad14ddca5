"""Fixtures shared by the security tests."""

from __future__ import annotations

import json
import logging

import pytest


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
