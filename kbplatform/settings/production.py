"""Production settings: everything secret or site-specific must come from the environment (no defaults)."""

from kbplatform.settings.base import *  # noqa: F403
from kbplatform.settings.base import _whole_number, env

SECRET_KEY = env.str("DJANGO_SECRET_KEY")
DEBUG = False
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS")
DATABASES = {"default": env.db("DATABASE_URL")}
DATABASES["default"]["CONN_MAX_AGE"] = _whole_number("DATABASE_CONN_MAX_AGE", default=60, minimum=0)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True  # a connection the server dropped is replaced, not an error
REDIS_URL = env.str("REDIS_URL")
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_TASK_ALWAYS_EAGER = False
MILVUS_URI = env.str("MILVUS_URI")
SESSION_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
# Static files (the admin's CSS and JS) are served by WhiteNoise from collectstatic's output, hashed and
# compressed, so gunicorn needs no separate web server for them.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
