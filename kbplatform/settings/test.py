"""Settings for the test suite: the base settings, isolated per run so parallel runs and the developer's own
`make run` data on the same Redis never mix (cache prefix, Celery queue and Milvus collection per run)."""

import os
import uuid

from kbplatform.settings.base import *  # noqa: F403
from kbplatform.settings.base import CACHES, DATABASES, VAR_DIR, env

RUN_ID = env.str("KB_TEST_RUN_ID", default=uuid.uuid4().hex[:8])
os.environ["KB_TEST_RUN_ID"] = RUN_ID  # inherited by the Celery worker the tests start

CACHES["default"]["KEY_PREFIX"] = f"kbtest-{RUN_ID}"
CELERY_TASK_DEFAULT_QUEUE = f"kbtest-{RUN_ID}"
CELERY_TASK_ALWAYS_EAGER = False
MILVUS_COLLECTION = f"kbtest_{RUN_ID}"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
MEDIA_ROOT = VAR_DIR / "test-media"
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
    DATABASES["default"]["NAME"] = test_name
