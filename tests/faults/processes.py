"""A Redis server of the fault tests' own, on a free port, that a test may stop and start again.

The machine's shared Redis (127.0.0.1:6379) is never stopped: other people's test runs and the broker of the
test Celery worker live there.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.services import free_port, port_open, service_missing


class RedisServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = Path(tempfile.mkdtemp(prefix="kbtest-redis-"))
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            service_missing("redis-server", "no redis-server binary on PATH")
        # No persistence: a restarted Redis comes back empty, the worst case for a cache.
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.dir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while not port_open(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                service_missing("redis-server", f"did not start on port {self.port}")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGKILL: Redis vanishes mid-conversation, no graceful shutdown."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
