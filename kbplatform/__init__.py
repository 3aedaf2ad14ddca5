"""kbplatform: multi-tenant knowledge bases with multi-turn RAG that does not repeat itself."""

import os

# Before numpy is first imported (this package is imported before the settings, the apps and numpy): OpenBLAS
# answers a small matrix product with a thread per core that then spins, waiting for more work. The platform's
# products are small (a turn's recent questions against the intents' examples) and run beside the database, Redis
# and other requests on a few cores; the spinning threads took 30 ms of CPU per cache hit on two cores
# (bench/turn_latency.py, BENCHMARKS.md). Set the variable to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from kbplatform.celery import app as celery_app  # noqa: E402

__all__ = ("celery_app",)
