from __future__ import annotations

import pytest

from retrieval import embeddings


@pytest.fixture(params=["torch", "onnx"])
def embedding_backend(request, settings, monkeypatch) -> str:
    """Runs the test once on each backend, the process's model loaded afresh for it (and the previous one put back
    afterwards)."""
    settings.EMBEDDING_BACKEND = request.param
    monkeypatch.setattr(embeddings, "_models", {})
    return request.param
