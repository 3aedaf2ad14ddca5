"""What runs the embedding model (EMBEDDING_BACKEND): the onnx backend gives PyTorch's vectors, shares its model
identity, makes its ONNX file once for every process and remakes a broken one; a file that can be neither read nor
made is the model being unavailable (503 for turns and searches), with a message that says what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from django.core.exceptions import ImproperlyConfigured

from conversations.models import Turn
from kbplatform.settings import base as base_settings
from retrieval import embedding_onnx, embeddings
from retrieval.embedding_onnx import OnnxFileUnavailable
from tests.conversations.helpers import indexed_kb

ROOT = Path(__file__).resolve().parents[2]
LONG_TEXT = " ".join(
    f"Sentence {number} of a long abstract about glacier retreat and moraines." for number in range(60)
)
TEXTS = [
    "How do I reset my password?",
    LONG_TEXT,  # past max_seq_length: cut where sentence-transformers cuts it
    f"A key: {'3f9a' * 200} and then more words.",  # a long run, broken before the model reads it
    "   surrounded by spaces \n\t",
    "Les glaciers reculent; 氷河は後退している; 빙하가 후퇴한다.",
    "x",
]


@dataclass
class OnnxDir:
    path: Path
    exports: list[Path]


@pytest.fixture
def onnx_dir(settings, tmp_path, monkeypatch) -> OnnxDir:
    """A process on the onnx backend with an ONNX directory of its own (nothing loaded yet), and the files it
    exported."""
    settings.EMBEDDING_BACKEND = "onnx"
    settings.EMBEDDING_ONNX_DIR = tmp_path / "models"
    monkeypatch.setattr(embeddings, "_models", {})
    exports: list[Path] = []
    real_export = embedding_onnx.onnx_export

    def counting_export(**kwargs) -> None:
        exports.append(kwargs["destination"])
        real_export(**kwargs)

    monkeypatch.setattr(embedding_onnx, "onnx_export", counting_export)
    return OnnxDir(path=Path(settings.EMBEDDING_ONNX_DIR), exports=exports)


@pytest.fixture(scope="module")
def made_onnx_file() -> Path:
    """The shared ONNX file of the model (EMBEDDING_ONNX_DIR as configured), made if it is not there yet."""
    embeddings.embedding_model() if embeddings.backend() == "onnx" else embeddings._onnx_encoder(
        embeddings.model_path(), embeddings.model_identity()
    )
    return embeddings.onnx_file()


def _copy(source: Path, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / source.name
    target.write_bytes(source.read_bytes())
    return target


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("onxx", "'onxx' is none of onnx, torch"),
        ("Torch", "'Torch' is none of onnx, torch"),
        ("onnx-int8", "'onnx-int8' is not offered: dynamic int8 quantisation moves the model's vectors"),
    ],
)
def test_an_unknown_or_refused_backend_stops_the_settings_with_a_message(monkeypatch, value, message):
    monkeypatch.setenv("EMBEDDING_BACKEND", value)
    with pytest.raises(ImproperlyConfigured, match=f"^EMBEDDING_BACKEND: {message}"):
        base_settings._embedding_backend()


def test_the_default_backend_is_onnx(monkeypatch):
    monkeypatch.delenv("EMBEDDING_BACKEND", raising=False)
    assert base_settings._embedding_backend() == "onnx"


def test_onnx_vectors_are_pytorchs(settings, monkeypatch, made_onnx_file):
    assert embeddings.token_count(LONG_TEXT) > embeddings.max_sequence_tokens()
    assert embeddings.long_run_breaks(TEXTS[2])
    vectors = {}
    for backend in ("torch", "onnx"):
        settings.EMBEDDING_BACKEND = backend
        monkeypatch.setattr(embeddings, "_models", {})
        vectors[backend] = embeddings.embed_texts(TEXTS, batch_size=4)  # two batches, padded
        alone = np.vstack([embeddings.embed_query(text) for text in TEXTS])
        np.testing.assert_allclose(vectors[backend], alone, atol=1e-5)
    cosines = np.sum(vectors["torch"] * vectors["onnx"], axis=1)
    assert cosines.min() >= 0.9999, cosines
    assert vectors["onnx"].dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors["onnx"], axis=1), 1.0, atol=1e-5)


def test_the_model_is_described_by_its_files_alike_on_both_backends(settings, monkeypatch, made_onnx_file):
    """Dimension and input length come from the model's configuration files and are what the loaded model says;
    the onnx backend keeps PyTorch's identity, as its vectors are PyTorch's."""
    settings.EMBEDDING_BACKEND = "torch"
    monkeypatch.setattr(embeddings, "_models", {})
    torch_model = embeddings.embedding_model()
    torch_identity, torch_id = embeddings.model_identity(), embeddings.model_id()
    settings.EMBEDDING_BACKEND = "onnx"
    monkeypatch.setattr(embeddings, "_models", {})
    assert embeddings.embedding_dimension() == torch_model.get_embedding_dimension() == 384
    assert embeddings.max_sequence_tokens() == torch_model.max_seq_length == 256
    assert not embeddings._models  # neither needed the model
    onnx_model = embeddings.embedding_model()
    assert onnx_model.get_embedding_dimension() == 384 and onnx_model.max_seq_length == 256
    assert (embeddings.model_identity(), embeddings.model_id()) == (torch_identity, torch_id)


def test_the_onnx_file_is_made_once_and_then_reused(onnx_dir):
    first = embeddings.embed_query("Where are the moraines?")
    (path,) = onnx_dir.exports
    assert path == embeddings.onnx_file() and path.parent == onnx_dir.path
    made = path.stat()
    assert [entry.name for entry in onnx_dir.path.iterdir() if entry.suffix == ".tmp"] == []  # no temporary file left

    embeddings._models.clear()  # a process started later on the same directory
    again = embeddings.embed_query("Where are the moraines?")

    assert len(onnx_dir.exports) == 1
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (made.st_ino, made.st_mtime_ns)
    np.testing.assert_array_equal(first, again)


def _embed_in_a_process(directory: Path) -> subprocess.Popen:
    """A fresh Python process on the onnx backend and `directory` that embeds one question and prints whether it
    made the file, whether it imported torch, and the vector."""
    script = """
import json, sys
import django
django.setup()
from retrieval import embedding_onnx, embeddings
made = []
export = embedding_onnx.onnx_export
embedding_onnx.onnx_export = lambda **kwargs: (made.append(1), export(**kwargs))
vector = embeddings.embed_query("Where are the moraines?")
print(json.dumps({"made": len(made), "torch": "torch" in sys.modules, "vector": vector.tolist()}))
"""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "kbplatform.settings.base",
        "EMBEDDING_BACKEND": "onnx",
        "EMBEDDING_ONNX_DIR": str(directory),
        "LOG_LEVEL": "WARNING",
    }
    return subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _result(process: subprocess.Popen) -> dict:
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


def test_processes_starting_together_make_the_file_once_and_a_later_one_neither_makes_it_nor_imports_torch(tmp_path):
    directory = tmp_path / "models"
    together = [_embed_in_a_process(directory) for _ in range(2)]
    results = [_result(process) for process in together]

    assert sorted(result["made"] for result in results) == [0, 1]
    np.testing.assert_array_equal(results[0]["vector"], results[1]["vector"])
    (path,) = directory.glob("*.onnx")
    made = path.stat()

    later = _result(_embed_in_a_process(directory))
    assert later["made"] == 0 and later["torch"] is False
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (made.st_ino, made.st_mtime_ns)
    np.testing.assert_array_equal(later["vector"], results[0]["vector"])


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_broken_onnx_file_is_made_again(onnx_dir, made_onnx_file, damage):
    path = _copy(made_onnx_file, onnx_dir.path)
    good = path.read_bytes()
    path.write_bytes({"truncated": good[: len(good) // 2], "garbage": os.urandom(4096), "empty": b""}[damage])

    vector = embeddings.embed_query("Where are the moraines?")

    assert onnx_dir.exports == [path]
    assert path.stat().st_size > len(good) // 2
    embeddings._models.clear()
    assert onnx_dir.exports == [path]
    np.testing.assert_allclose(embeddings.embed_query("Where are the moraines?"), vector, atol=1e-6)


def test_a_file_that_can_be_neither_read_nor_made_makes_the_model_unavailable(onnx_dir, made_onnx_file, monkeypatch):
    path = _copy(made_onnx_file, onnx_dir.path)
    path.write_bytes(b"not an onnx file")
    monkeypatch.setitem(sys.modules, "torch", None)  # an image without torch cannot make it

    with pytest.raises(embeddings.EmbeddingModelUnavailable) as raised:
        embeddings.embed_query("Where are the moraines?")

    message = str(raised.value)
    assert f"{path} does not load" in message and "it cannot be made: the model at" in message
    assert "manage.py embedding_model_export" in message and "EMBEDDING_BACKEND=torch" in message
    assert raised.value.extra["code"] == "embedding_model_unavailable"
    assert path.read_bytes() == b"not an onnx file"  # nothing half-made was put in its place


def test_an_export_that_does_not_reproduce_the_model_is_not_kept(onnx_dir, monkeypatch):
    monkeypatch.setattr(embedding_onnx, "EXPORT_MIN_COSINE", 1.01)  # no export can pass this check

    with pytest.raises(embeddings.EmbeddingModelUnavailable, match="the export does not reproduce the model"):
        embeddings.embed_query("Where are the moraines?")

    assert list(onnx_dir.path.iterdir()) == [onnx_dir.path / (embeddings.onnx_file().name + ".lock")]


@pytest.fixture
def onnx_file_unavailable(settings, tmp_path, monkeypatch):
    """Returns a function that moves the process onto an ONNX directory without its file, where none can be made,
    as a web process started on a read-only volume the file was never made on would be."""

    def unavailable() -> None:
        settings.EMBEDDING_BACKEND = "onnx"
        settings.EMBEDDING_ONNX_DIR = tmp_path / "read-only"
        monkeypatch.setattr(embeddings, "_models", {})

        def refuse(**kwargs) -> None:
            raise OnnxFileUnavailable(f"{kwargs['destination'].parent} cannot be written (read-only)")

        monkeypatch.setattr(embedding_onnx, "onnx_export", refuse)

    return unavailable


def _assert_onnx_unavailable(response) -> None:
    assert response.status_code == 503, response.content
    body = response.json()
    assert body["extra"]["code"] == "embedding_model_unavailable"
    assert body["message"].startswith("The embedding model cannot be read at ")
    assert ".onnx: there is no " in body["message"] and "cannot be written (read-only)" in body["message"]
    assert "manage.py embedding_model_export" in body["message"]


@pytest.mark.django_db(transaction=True)
def test_a_search_without_its_onnx_file_is_a_503_that_says_how_to_make_it(
    api_client, tenant, milvus_server, onnx_file_unavailable
):
    knowledge_base = indexed_kb(tenant)
    onnx_file_unavailable()

    response = api_client.post(
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/search/", {"query": "How do I reset my password?"}, format="json"
    )

    _assert_onnx_unavailable(response)


@pytest.mark.django_db(transaction=True)
def test_a_turn_without_its_onnx_file_is_a_503_and_writes_no_turn(
    api_client, tenant, milvus_server, redis_available, onnx_file_unavailable
):
    knowledge_base = indexed_kb(tenant)
    conversation = api_client.post("/api/v1/conversations/", {"knowledge_base": knowledge_base.pk}, format="json")
    assert conversation.status_code == 201, conversation.content
    onnx_file_unavailable()

    response = api_client.post(
        f"/api/v1/conversations/{conversation.json()['id']}/messages/",
        {"question": "How do I reset my password?"},
        format="json",
    )

    _assert_onnx_unavailable(response)
    assert not Turn.objects.for_tenant(tenant).exists()


@pytest.mark.django_db
def test_the_health_check_names_the_backend_and_an_onnx_file_not_made_yet(settings, onnx_dir, made_onnx_file):
    from kbplatform.health import _embedding_model

    identity = embeddings.model_identity()
    status, detail = _embedding_model()
    assert status == "ok"
    assert f"{identity} (default) on onnx, its ONNX file made on first use, not loaded yet" in detail
    assert f"{embeddings.model_identity(embeddings.USE_MODEL_NAME)}, not loaded yet" in detail
    assert onnx_dir.exports == []  # the health check makes nothing
    _copy(made_onnx_file, onnx_dir.path)
    assert f"{identity} (default) on onnx, not loaded yet" in _embedding_model()[1]
    settings.EMBEDDING_BACKEND = "torch"
    assert f"{identity} (default) on torch, not loaded yet" in _embedding_model()[1]
    embeddings.embed_query("loaded now")
    assert f"{identity} (default) on torch, loaded" in _embedding_model()[1]
