"""docker-compose.yml cannot be run here (no Docker engine): check its structure and wiring by parsing it."""

import importlib
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
APP_SERVICES = ("web", "worker", "beat", "migrate")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_every_expected_service_is_there(compose):
    assert set(compose["services"]) == {"postgres", "redis", "etcd", "minio", "milvus", *APP_SERVICES}


@pytest.mark.parametrize("name", ["postgres", "redis", "etcd", "minio", "milvus", "web", "worker"])
def test_long_running_services_have_health_checks(compose, name):
    check = compose["services"][name]["healthcheck"]
    assert check["test"] and check["interval"]


def _host_of(url: str) -> str:
    return re.match(r"^\w+://(?:[^@/]*@)?([^:/]+)", url).group(1)


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_are_wired_to_the_backing_services(compose, name):
    service = compose["services"][name]
    env = service["environment"]
    assert _host_of(env["DATABASE_URL"]) == "postgres"
    assert _host_of(env["REDIS_URL"]) == "redis"
    assert _host_of(env["MILVUS_URI"]) == "milvus"
    assert env["DJANGO_SETTINGS_MODULE"] == "kbplatform.settings.production"
    importlib.import_module(env["DJANGO_SETTINGS_MODULE"].rsplit(".", 1)[0])
    assert env["DJANGO_SECRET_KEY"].startswith("${DJANGO_SECRET_KEY:?"), "the secret must have no default"
    assert service["build"] == "."
    depends = service["depends_on"]
    assert depends["postgres"]["condition"] == "service_healthy"
    if name != "migrate":
        for backing in ("redis", "milvus"):
            assert depends[backing]["condition"] == "service_healthy"
        assert depends["migrate"]["condition"] == "service_completed_successfully"


def test_web_and_worker_share_the_uploaded_files(compose):
    web = compose["services"]["web"]["volumes"]
    worker = compose["services"]["worker"]["volumes"]
    assert "media:/var/lib/kbplatform/media" in web and "media:/var/lib/kbplatform/media" in worker


def test_milvus_standalone_uses_etcd_and_minio(compose):
    milvus = compose["services"]["milvus"]
    assert milvus["command"] == ["milvus", "run", "standalone"]
    assert milvus["environment"]["ETCD_ENDPOINTS"] == "etcd:2379"
    assert milvus["environment"]["MINIO_ADDRESS"] == "minio:9000"
    assert {"etcd", "minio"} <= set(milvus["depends_on"])


def test_named_volumes_are_declared_and_persist_the_data(compose):
    declared = set(compose["volumes"])
    used = set()
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if not source.startswith((".", "/")):
                used.add(source)
    assert used <= declared
    assert {"pgdata", "redisdata", "milvusdata", "miniodata", "etcddata", "media"} <= used


def test_processes_point_at_real_modules(compose):
    assert "kbplatform.wsgi" in compose["services"]["web"]["command"]
    importlib.import_module("kbplatform.wsgi")
    assert compose["services"]["worker"]["command"][:3] == ["celery", "-A", "kbplatform"]
    assert compose["services"]["web"]["ports"] == ["${KB_HTTP_PORT:-8000}:8000"]


def test_minio_is_checked_with_its_own_client_not_curl(compose):
    """MinIO images may ship without curl; a curl check would leave MinIO, and every service after it, unhealthy."""
    assert compose["services"]["minio"]["healthcheck"]["test"] == ["CMD", "mc", "ready", "local"]
