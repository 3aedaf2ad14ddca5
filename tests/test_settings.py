import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION_REQUIRED = ["DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL", "MILVUS_URI"]


def _load_production(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _production_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PRODUCTION_REQUIRED}
    env.update(
        DJANGO_SETTINGS_MODULE="kbplatform.settings.production",
        DJANGO_SECRET_KEY="x" * 50,
        DJANGO_ALLOWED_HOSTS="kb.example.com",
        DATABASE_URL="postgres://kb:pw@db:5432/kb",
        REDIS_URL="redis://redis:6379/0",
        MILVUS_URI="http://milvus:19530",
        KB_VAR_DIR=str(ROOT / "var" / "prod-settings-test"),
    )
    return env


def test_production_settings_load_with_every_secret_given():
    result = _load_production(_production_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("missing", PRODUCTION_REQUIRED)
def test_production_settings_have_no_default_for_secrets(missing):
    env = _production_env()
    del env[missing]
    result = _load_production(env)
    assert result.returncode != 0
    assert missing in result.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [("KB_RATE_LIMIT", "1200/minutes"), ("KB_RATE_LIMIT", "fast"), ("KB_RATE_LIMIT_TENANTS", "acme=60/min,globex=6/x")],
)
def test_a_rate_limit_that_does_not_parse_stops_the_process_at_start(variable, value):
    env = {**_production_env(), variable: value}
    result = _load_production(env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and variable in result.stderr


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "30s"])
def test_an_answer_timeout_that_cannot_be_met_stops_the_process_at_start(value):
    result = _load_production({**_production_env(), "LLM_TIMEOUT": value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and "LLM_TIMEOUT" in result.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("KB_RATE_LIMIT_BURST", "abc"),
        ("KB_INGEST_LEASE_SECONDS", "-1"),
        ("KB_INGEST_EMBED_BATCH", "0"),
        ("KB_INGEST_QUEUED_STALE_SECONDS", "15m"),
        ("KB_MAX_UPLOAD_BYTES", "50MB"),
        ("DATABASE_CONN_MAX_AGE", "-1"),
        ("DATABASE_PREPARE_THRESHOLD", "0"),
        ("DATABASE_PREPARE_THRESHOLD", "never"),
        ("KB_HEALTH_WORKER_TIMEOUT", "soon"),
        ("CELERY_TASK_SOFT_TIME_LIMIT", "9999"),
    ],
)
def test_a_count_or_duration_that_does_not_parse_or_cannot_work_stops_the_process_at_start(variable, value):
    result = _load_production({**_production_env(), variable: value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and variable in result.stderr


def test_valid_rate_limits_start():
    env = {**_production_env(), "KB_RATE_LIMIT": "", "KB_RATE_LIMIT_TENANTS": "acme=6000/min,globex=60/hour"}
    result = _load_production(env)
    assert result.returncode == 0, result.stderr


def test_every_beat_entry_names_a_registered_task():
    """A misspelt task name in CELERY_BEAT_SCHEDULE is silently never run: hold each to a registered task."""
    from django.conf import settings

    from kbplatform.celery import app

    app.loader.import_default_modules()
    names = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "embedding_cache_purge" in names
    assert names <= set(app.tasks), names - set(app.tasks)


def test_production_settings_keep_the_connect_timeout_and_the_platform_backend():
    env = _production_env()
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; d = settings.DATABASES['default']; "
            "print(d['ENGINE'], d['OPTIONS']['connect_timeout'], d['CONN_MAX_AGE'], d['CONN_HEALTH_CHECKS'])",
        ],
        env={**env, "DATABASE_CONNECT_TIMEOUT": "7"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["kbplatform.db.postgresql", "7", "60", "True"]


@pytest.mark.parametrize(("value", "expected"), [(None, "5"), ("2", "2"), ("off", "None"), (" OFF ", "None")])
def test_the_prepare_threshold_reaches_psycopg_or_is_off(value, expected):
    env = _production_env()
    if value is not None:
        env["DATABASE_PREPARE_THRESHOLD"] = value
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(settings.DATABASES['default']['OPTIONS']['prepare_threshold'])",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [expected]


@pytest.mark.parametrize(
    ("variables", "fails"),
    [
        ({"EMBEDDING_MODELS": "", "EMBEDDING_MODEL_DEFAULT": ""}, False),  # compose passes empty: the defaults
        ({"EMBEDDING_MODELS": "use-multilingual-v3", "EMBEDDING_MODEL_DEFAULT": ""}, False),
        ({"EMBEDDING_MODEL_DEFAULT": "use-multilingual-v3"}, False),
        ({"EMBEDDING_MODELS": "bge-m3"}, True),  # no such model here
        ({"EMBEDDING_MODELS": "all-MiniLM-L6-v2", "EMBEDDING_MODEL_DEFAULT": "use-multilingual-v3"}, True),
        ({"EMBEDDING_MODEL_PATH": "/models/e5-small"}, False),  # the primary model takes the directory's name
        ({"EMBEDDING_MODEL_PATH": "/models/e5-small", "EMBEDDING_MODELS": "all-MiniLM-L6-v2"}, True),
    ],
)
def test_the_offered_embedding_models_are_checked_at_start(variables, fails):
    result = _load_production({**_production_env(), **variables})
    assert (result.returncode != 0) is fails, result.stderr
    if fails:
        assert "ImproperlyConfigured" in result.stderr and "EMBEDDING_MODEL" in result.stderr


@pytest.mark.parametrize(
    ("value", "fails"),
    [
        ("", False),
        ("all-MiniLM-L6-v2=0.35, use-multilingual-v3=off", False),
        ("all-MiniLM-L6-v2=off", False),
        ("all-minilm-l6-v2=0.35", True),  # misspelt: the shipped floor would stay in force unnoticed
        ("all-MiniLM-L6-v2=high", True),
        ("all-MiniLM-L6-v2=1.5", True),
        ("all-MiniLM-L6-v2", True),  # no floor named
    ],
)
def test_the_answers_similarity_floors_are_checked_at_start(value, fails):
    result = _load_production({**_production_env(), "ANSWER_SIMILARITY_FLOORS": value})
    assert (result.returncode != 0) is fails, result.stderr
    if fails:
        assert "ImproperlyConfigured" in result.stderr and "ANSWER_SIMILARITY_FLOORS" in result.stderr
