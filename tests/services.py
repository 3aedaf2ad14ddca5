"""Real services for integration tests: Redis (already running), Milvus Lite and a Celery worker (started here).

With `CI` set, a missing service fails the test; elsewhere it skips with the reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from kbplatform.devserver import MILVUS_LITE_SERVER_ENV, milvus_lite_cut_index_files_remove

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
IN_CI = bool(os.environ.get("CI"))
T = TypeVar("T")


def service_missing(name: str, why: str) -> None:
    message = f"{name} is not available: {why}"
    if IN_CI:
        pytest.fail(f"{message} (CI is set: services are required, tests never skip)")
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.3)
        return sock.connect_ex((host, port)) == 0


class MilvusServer:
    """A `milvus-lite server` process on a free port, with its own data directory; can be stopped and started
    again on the same port and data (for fault tests)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.data_dir = Path(tempfile.mkdtemp(prefix="kbtest-milvus-"))
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.log = open(self.data_dir / "server.log", "ab")

    def start(self) -> None:
        binary = BIN / "milvus-lite"
        if not binary.exists():
            service_missing("milvus-lite", f"{binary} not found")
        milvus_lite_cut_index_files_remove(self.data_dir / "data")
        self.process = subprocess.Popen(
            [
                str(binary),
                "server",
                "--data-dir",
                str(self.data_dir / "data"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**MILVUS_LITE_SERVER_ENV, **os.environ},
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while not port_open(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                service_missing("milvus-lite server", f"did not start; see {self.data_dir / 'server.log'}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    def close(self) -> None:
        self.stop()
        self.log.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)


class CeleryWorker:
    """A real `celery worker` process consuming this test run's queue, on the test database."""

    def __init__(self, env: dict[str, str], queue: str) -> None:
        self.env = env
        self.queue = queue
        self.process: subprocess.Popen | None = None
        self.log_path = Path(tempfile.mkstemp(prefix="kbtest-worker-", suffix=".log")[1])

    def start(self, timeout: float = 90) -> None:
        from kbplatform.celery import app

        log = open(self.log_path, "ab")
        name = f"kbtest-{os.getpid()}-{time.monotonic_ns()}@%h"
        self.process = subprocess.Popen(
            [
                str(BIN / "celery"),
                "-A",
                "kbplatform",
                "worker",
                "-Q",
                self.queue,
                "-n",
                name,
                "--concurrency",
                "1",
                "--pool",
                "prefork",
                "-l",
                "info",
                "--without-gossip",
                "--without-mingle",
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"Celery worker exited: {self.log_path.read_text()[-3000:]}")
            replies = app.control.ping(timeout=0.5, destination=[name.replace("%h", socket.gethostname())])
            if replies:
                return
        pytest.fail(f"Celery worker did not answer within {timeout}s: {self.log_path.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL the whole worker (parent and pool children), as a crashed machine would."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def wait_for(
    predicate: Callable[[], T],
    *,
    timeout: float = 90,
    interval: float = 0.1,
    what: str = "condition",
    worker: CeleryWorker | None = None,
) -> T:
    """predicate()'s first true value, asked every `interval` seconds; a failure naming `what` (and the tail of
    `worker`'s log, when given) once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    tail = f"\n{worker.log_tail()}" if worker is not None else ""
    raise AssertionError(f"{what} not met within {timeout}s{tail}")
