"""`make run`: the whole platform on embedded defaults, in one terminal, with no questions asked.

Starts (or reuses) Milvus Lite and Redis, migrates, ensures the `demo` tenant with an admin login and an API
key of every scope, then runs a Celery worker, beat and the web server until Ctrl-C, which stops them all, and gives
the demo tenant two small help centres to talk to, one English and one Chinese (`DEMO_KNOWLEDGE_BASES`). Running it
again reuses the data under `var/`, the admin password and the API key.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("KB_VAR_DIR", ROOT / "var"))
BIN = Path(sys.executable).parent
WEB_ADDRESS = os.environ.get("KB_WEB_ADDRESS", "127.0.0.1:8000")
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
DEFAULT_MILVUS = "http://127.0.0.1:19530"

# Set for every `milvus-lite server` the platform starts (here, and the tests' and benchmarks' own servers). Milvus
# Lite holds its data in Arrow buffers; with Arrow's default allocator (mimalloc) memory freed after each flush and
# merge of segments stays with the process, so a server that is written to all day grows without bound while its
# data does not. The system allocator hands it back, once glibc's malloc is told to: buffers above 128 KB mapped on
# their own and unmapped when freed (a fixed threshold: glibc otherwise raises it to the largest buffer freed and
# keeps such buffers on its heap), the heap's free top returned, and two arenas instead of one per thread of the
# server's pool. An operator's own values are kept.
MILVUS_LITE_SERVER_ENV = {
    "ARROW_DEFAULT_MEMORY_POOL": "system",
    "MALLOC_MMAP_THRESHOLD_": "131072",
    "MALLOC_TRIM_THRESHOLD_": "131072",
    "MALLOC_ARENA_MAX": "2",
}

children: list[subprocess.Popen] = []


def milvus_lite_cut_index_files_remove(data_dir: Path) -> list[Path]:
    """Before a `milvus-lite server` starts on `data_dir`: remove the vector index files a stopped server left cut
    short.

    Milvus Lite writes a segment's index file in place (not to a temporary name renamed when complete), so a server
    stopped while it writes one, during a flush or a merge of segments, leaves the file empty or holding only the
    pages written so far; the next server then fails to load the collection on every request, for good. An index file
    is a cache of the segment beside it: where none exists Milvus Lite builds it again from the segment's rows, so
    removing a cut one loses nothing. A file is cut when it is empty, or when it is an HNSW index whose parts, read by
    their recorded lengths, run past its end (`hnsw_index_file_cut`). Returns what was removed."""
    removed = []
    for path in data_dir.glob("collections/*/partitions/*/indexes/*.idx"):
        if path.is_file() and (path.stat().st_size == 0 or hnsw_index_file_cut(path)):
            path.unlink()
            removed.append(path)
    return removed


class _CutShort(Exception):
    pass


def hnsw_index_file_cut(path: Path) -> bool:
    """Whether `path`, a FAISS HNSW index over flat float vectors as Milvus Lite writes one (`IHNf`), ends before its
    parts do: its header, the graph's five length-prefixed arrays and five integers, then the flat storage (`IxFI` or
    `IxF2`) with its header and vectors, which end the file. A file of any other kind, or whose layout differs from
    this one, is left as it is (False): only a file this reads to a premature end is called cut. Reads the headers
    and lengths only (some hundred bytes), seeking past each array, so a start does not read whole indexes."""
    with path.open("rb") as file:
        size = os.fstat(file.fileno()).st_size

        def take(layout: str) -> tuple:
            wanted = struct.calcsize(layout)
            raw = file.read(wanted)
            if len(raw) < wanted:
                raise _CutShort
            return struct.unpack(layout, raw)

        def array(item_size: int) -> None:
            (count,) = take("<Q")
            end = file.tell() + count * item_size
            if end > size:
                raise _CutShort
            file.seek(end)

        def header() -> None:
            # d, ntotal, two unused 64-bit fields, is_trained, the metric (and its argument for metrics after L2 and IP)
            (_, _, _, _, _, metric) = take("<iqqqBi")
            if metric > 1:
                take("<f")

        if file.read(4) != b"IHNf":
            return False
        try:
            header()
            for item_size in (8, 4, 4, 8, 4):  # assign_probas, cum_nneighbor_per_level, levels, offsets, neighbors
                array(item_size)
            take("<iiiii")  # entry_point, max_level, efConstruction, efSearch, upper_beam
            storage = file.read(4)
            if len(storage) < 4:
                return True
            if storage not in (b"IxFI", b"IxF2"):
                return False
            header()
            array(4)  # the vectors, counted in floats
        except _CutShort:
            return True
    return False


def say(message: str) -> None:
    print(f"[make run] {message}", flush=True)


def port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen:
    log = open(VAR / "logs" / f"{name}.log", "ab")  # lives as long as the child
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    children.append(process)
    say(f"started {name} (pid {process.pid}, log var/logs/{name}.log)")
    return process


def wait_for(what: str, ready: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if any(child.poll() is not None for child in children):
            stop_all()
            sys.exit(f"[make run] a process exited while waiting for {what}: see var/logs/")
        time.sleep(0.3)
    stop_all()
    sys.exit(f"[make run] {what} did not become ready within {timeout:.0f}s: see var/logs/")


def redis_answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.exceptions.RedisError:
        return False


def choose_redis(env: dict[str, str]) -> None:
    url = env.get("REDIS_URL", DEFAULT_REDIS)
    if url and redis_answers(url):
        env["REDIS_URL"] = url
        say(f"Redis: using {url}")
        return
    binary = shutil.which("redis-server")
    if binary:
        port = free_port()
        start("redis", [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], env)
        env["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
        wait_for("redis", lambda: redis_answers(env["REDIS_URL"]), 20)
        say(f"Redis: {url or 'none'} did not answer; started a local redis-server on port {port}")
        return
    env["REDIS_URL"] = ""
    env["CELERY_TASK_ALWAYS_EAGER"] = "true"
    say("Redis: NONE AVAILABLE. Running with an in-process cache and eager tasks (documents are indexed inside")
    say("       the web request; no worker, no beat). Install redis-server or set REDIS_URL for the real thing.")


def choose_milvus(env: dict[str, str]) -> None:
    uri = env.get("MILVUS_URI", DEFAULT_MILVUS)
    env["MILVUS_URI"] = uri
    host_port = uri.split("://", 1)[-1].rstrip("/")
    host, _, port = host_port.partition(":")
    if port_open(host, int(port or 19530)):
        say(f"Milvus: using {uri}")
        return
    if uri != DEFAULT_MILVUS:
        sys.exit(f"[make run] MILVUS_URI={uri} does not answer")
    data_dir = VAR / "milvus"
    data_dir.mkdir(parents=True, exist_ok=True)
    for path in milvus_lite_cut_index_files_remove(data_dir):
        say(f"Milvus: removed {path.relative_to(data_dir)}, an index file cut short by a stop (it is built again)")
    start(
        "milvus",
        [
            str(BIN / "milvus-lite"),
            "server",
            "--data-dir",
            str(data_dir),
            "--host",
            "127.0.0.1",
            "--port",
            port or "19530",
        ],
        {**MILVUS_LITE_SERVER_ENV, **env},
    )
    wait_for("milvus-lite server", lambda: port_open(host, int(port or 19530)), 60)
    say(f"Milvus: started milvus-lite server on {uri} (data in var/milvus)")


def manage(env: dict[str, str], *args: str, capture: bool = False) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        check=True,
        stdout=subprocess.PIPE if capture else None,
        text=True,
    )
    return result.stdout or ""


def demo_tenant_args(*, email: str, password: str) -> list[str]:
    """`manage.py create_tenant`'s arguments for the demo tenant. Each value is joined to its option with "=": a
    generated password may begin with "-" (one in 64 of `token_urlsafe`'s), which argparse would read as an option."""
    return ["create_tenant", "demo", "--name=Demo", f"--admin-email={email}", f"--admin-password={password}"]


# The demo tenant's two help centres, one English and one Chinese, each with the model and analyser its language
# wants: what a new user asks first ("How do I reset my password?", "我忘了密码怎么办？").
DEMO_DOCUMENTS = ROOT / "kbplatform" / "demo"
DEMO_KNOWLEDGE_BASES = (
    ("help_centre_en", "Help centre", "all-MiniLM-L6-v2", "english"),
    ("help_centre_zh", "帮助中心", "use-multilingual-v3", "chinese"),
)


def demo_ingest_args() -> list[list[str]]:
    """`manage.py ingest`'s arguments for each demo knowledge base. Re-running them is safe: a document already in the
    knowledge base is skipped, so `make run` seeds on every start and adds only what is missing."""
    return [
        [
            "ingest",
            str(DEMO_DOCUMENTS / folder),
            "--tenant=demo",
            f"--kb={name}",
            f"--embedding-model={model}",
            f"--text-analyzer={analyzer}",
            "--no-wait",
            "-v",
            "0",
        ]
        for folder, name, model, analyzer in DEMO_KNOWLEDGE_BASES
    ]


def demo_credentials(env: dict[str, str]) -> tuple[str, str, str]:
    """(admin email, password, API key), reused across runs from var/demo.env. The key holds every scope, so the
    README's session (create a knowledge base, upload, converse) runs with it; a saved key that no longer does (its
    scopes edited in the admin, or revoked) is replaced."""
    path = VAR / "demo.env"
    saved = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line) if path.exists() else {}
    email, password = "admin@demo.local", saved.get("password")
    if not password:
        import secrets

        password = secrets.token_urlsafe(9)
    key = saved.get("api_key", "")
    args = demo_tenant_args(email=email, password=password)
    every_scope = ("--scope", "chat", "--scope", "ingest", "--scope", "admin")
    if key and manage(env, "check_api_key", key, *every_scope, capture=True).strip() == "valid":
        manage(env, *args, "--no-key")
    else:
        key = manage(env, *args, capture=True).strip().splitlines()[-1]
    path.write_text(f"password={password}\napi_key={key}\n")
    path.chmod(0o600)
    return email, password, key


def health(address: str) -> dict | None:
    import json

    try:
        with urllib.request.urlopen(f"http://{address}/api/health/", timeout=5) as response:
            return json.loads(response.read())
    except Exception:  # noqa: BLE001 - not up yet
        return None


def stop_all(*_: object) -> None:
    for child in reversed(children):
        if child.poll() is None:
            try:
                os.killpg(child.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)


def main() -> None:
    (VAR / "logs").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
    env["PYTHONUNBUFFERED"] = "1"
    signal.signal(signal.SIGTERM, lambda *_: (stop_all(), sys.exit(0)))
    try:
        choose_redis(env)
        choose_milvus(env)
        manage(env, "migrate", "--no-input", "-v", "0")
        email, password, key = demo_credentials(env)
        if env["REDIS_URL"]:
            start(
                "worker",
                [
                    str(BIN / "celery"),
                    "-A",
                    "kbplatform",
                    "worker",
                    "-l",
                    "info",
                    "--concurrency",
                    "1",
                    "-n",
                    f"kb-worker-{os.getpid()}@%h",
                ],
                env,
            )
            start(
                "beat",
                [str(BIN / "celery"), "-A", "kbplatform", "beat", "-l", "info", "-s", str(VAR / "celerybeat-schedule")],
                env,
            )
        start("web", [sys.executable, str(ROOT / "manage.py"), "runserver", "--noreload", WEB_ADDRESS], env)
        wait_for("the web server", lambda: health(WEB_ADDRESS) is not None, 90)
        deadline = time.monotonic() + 60
        report = health(WEB_ADDRESS)
        while report and report["status"] != "ok" and time.monotonic() < deadline:
            time.sleep(1)
            report = health(WEB_ADDRESS)
        components = ", ".join(f"{name} {c['status']}" for name, c in (report or {}).get("components", {}).items())
        seeded = True
        for args in demo_ingest_args():
            try:
                manage(env, *args)
            except subprocess.CalledProcessError:
                seeded = False
                say(f"could not seed the demo knowledge base from {args[1]} (see above); going on without it")
        names = " and ".join(f'"{name}" ({analyzer}, {model})' for _, name, model, analyzer in DEMO_KNOWLEDGE_BASES)
        print(
            f"""
kbplatform is running.
  Web + API     http://{WEB_ADDRESS}/        API docs http://{WEB_ADDRESS}/api/docs/
  Health        {report["status"] if report else "unknown"}: {components}
  Admin         http://{WEB_ADDRESS}/admin/   login {email} / {password}
  Demo API key  {key}
  Try           curl -H "Authorization: Api-Key {key}" http://{WEB_ADDRESS}/api/v1/whoami/
  Demo data     {names if seeded else "none (seeding failed, see above)"}
                curl -H "Authorization: Api-Key {key}" http://{WEB_ADDRESS}/api/v1/knowledge-bases/
Logs in var/logs/. Ctrl-C stops everything.
""",
            flush=True,
        )
        while all(child.poll() is None for child in children):
            time.sleep(1)
        failed = [child.args[0] for child in children if child.poll() is not None]
        say(f"a process stopped ({failed}); stopping the rest: see var/logs/")
    except KeyboardInterrupt:
        say("stopping…")
    finally:
        stop_all()


if __name__ == "__main__":
    main()
