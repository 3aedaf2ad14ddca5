"""Assertions shared by the security tests."""

from __future__ import annotations


def assert_refused(response, status: int, words: str) -> None:  # noqa: ANN001
    """The platform's error shape: the status, a body of exactly `message` and `extra`, and `words` in the message."""
    assert response.status_code == status, response.content[:300]
    body = response.json()
    assert set(body) == {"message", "extra"}
    assert words.lower() in body["message"].lower(), body["message"]
