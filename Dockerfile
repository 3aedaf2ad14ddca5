# The one image of web, worker, beat and the migrate job (see docker-compose.yml).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    DJANGO_SETTINGS_MODULE=kbplatform.settings.production \
    KB_VAR_DIR=/var/lib/kbplatform

WORKDIR /app
COPY requirements.txt .
# torch==2.13.0 is pinned; take the CPU wheel explicitly so the image does not carry CUDA.
RUN pip install --extra-index-url https://download.pytorch.org/whl/cpu -r requirements.txt

COPY . .
# The onnx embedding backend's file is made here, once, so no container makes it on its first query.
RUN useradd --system --create-home --uid 1000 kb \
    && mkdir -p /var/lib/kbplatform/media /var/lib/kbplatform/static /var/lib/kbplatform/beat \
    && DJANGO_SECRET_KEY=build DJANGO_ALLOWED_HOSTS=x DATABASE_URL=sqlite:////tmp/build.sqlite3 \
       REDIS_URL=redis://unused:6379/0 MILVUS_URI=http://unused:19530 \
       sh -c "python manage.py collectstatic --noinput && python manage.py embedding_model_export" \
    && chown -R kb:kb /var/lib/kbplatform
USER kb
EXPOSE 8000
CMD ["gunicorn", "kbplatform.wsgi", "--bind", "0.0.0.0:8000", "--workers", "4", "--timeout", "60"]
