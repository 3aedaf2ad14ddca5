from __future__ import annotations

import threading
import time

from rest_framework.test import APIClient


def conversation_start(client: APIClient, knowledge_base_id: int) -> int:
    response = client.post("/api/v1/conversations/", {"knowledge_base": knowledge_base_id}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def ask(client: APIClient, conversation_id: int, question: str, expect: int = 200, mode: str = "answer") -> dict:
    response = client.post(
        f"/api/v1/conversations/{conversation_id}/messages/", {"question": question, "mode": mode}, format="json"
    )
    assert response.status_code == expect, response.content[:500]
    return response.json()


def returns_within(seconds: float, call):  # noqa: ANN001, ANN201
    """call() on a thread: its result (or its exception), or a failure saying it was still waiting after `seconds`,
    so a test of a service that stopped answering fails instead of hanging the run. Returns (value, seconds taken)."""
    outcome: dict = {}

    def run() -> None:
        started = time.monotonic()
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            outcome["error"] = exc
        outcome["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting after {seconds:g} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"], outcome["seconds"]
