"""The suite's own collection: what `make test` relies on to hand tests to its xdist workers, which take each test
by its node id."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_each_fuzzed_api_operation_is_a_test_with_an_id_of_its_own():
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "tests/security/test_schemathesis.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    ids = [line for line in collected if "::" in line]
    assert len(ids) > 1
    assert len(set(ids)) == len(ids), ids[:3]
    assert (
        "tests/security/test_schemathesis.py::test_api_conforms_to_its_schema_and_never_answers_5xx[GET /api/health/]"
        in ids
    )
