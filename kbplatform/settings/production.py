"""Production settings: everything secret or site-specific must come from the environment (no defaults)."""

from kbplatform.settings.base import *  # noqa: F403
from kbplatform.settings.base import database_settings, env

SECRET_KEY = env.str("DJANGO_SECRET_KEY")
DEBUG = False
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS")
# Kept 60 s unless DATABASE_CONN_MAX_AGE says otherwise, and always checked: a connection the server dropped is
# replaced, not an error.
DATABASES = {"default": database_settings(env.db("DATABASE_URL"), conn_max_age_default=60, health_checks=True)}
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
