"""Settings for the test suite: the base settings, isolated per run and per pytest-xdist worker of a run, so parallel
runs, the workers of one run and the developer's own `make run` data on the same Redis never mix (cache prefix,
Celery queue, Milvus collection, media and test database each their own)."""

import os
import uuid

from kbplatform.settings.base import *  # noqa: F403
from kbplatform.settings.base import CACHES, DATABASES, VAR_DIR, env

RUN_ID = env.str("KB_TEST_RUN_ID", default=uuid.uuid4().hex[:8])
# Inherited by the xdist workers and by the Celery worker the tests start, which also inherits its xdist worker's
# PYTEST_XDIST_WORKER, so a Celery worker names the same queue, collection and database as the tests that start it.
os.environ["KB_TEST_RUN_ID"] = RUN_ID
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
ISOLATION_ID = f"{RUN_ID}{XDIST_WORKER}"

CACHES["default"]["KEY_PREFIX"] = f"kbtest-{ISOLATION_ID}"
CELERY_TASK_DEFAULT_QUEUE = f"kbtest-{ISOLATION_ID}"
CELERY_TASK_ALWAYS_EAGER = False
MILVUS_COLLECTION = f"kbtest_{ISOLATION_ID}"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
MEDIA_ROOT = VAR_DIR / "test-media" / ISOLATION_ID
DUPLICATE_MODEL_DIR = VAR_DIR / "test-duplicate-models" / ISOLATION_ID
# Every test client calls from 127.0.0.1: the suite's many deliberate 401s would spend one address's budgets of failed
# authentications and of requests without a key. tests/security/test_rate_limits.py turns them on with addresses of
# its own.
AUTH_FAILURE_RATE = ""
UNAUTHENTICATED_RATE = ""

if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-db.sqlite3")}
if env.bool("KB_TEST_WORKER", default=False):
    # A worker started by the tests must use the database the tests created, not the one it is named after.
    test_name = DATABASES["default"].get("TEST", {}).get("NAME") or f"test_{DATABASES['default']['NAME']}"
    # pytest-django gives each xdist worker's test database its worker id as a suffix.
    DATABASES["default"]["NAME"] = f"{test_name}_{XDIST_WORKER}" if XDIST_WORKER else test_name
