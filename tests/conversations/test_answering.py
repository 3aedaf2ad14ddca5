"""Answer generators: the extractive default, and the chat-completions backend against a local fake upstream."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conversations.answering import (
    ChatCompletionsAnswerGenerator,
    ExtractiveAnswerGenerator,
    SourcePassage,
    answer_generator,
)
from kbplatform.errors import UpstreamError, UpstreamTimeoutError
from retrieval.embeddings import token_count

PASSAGES = [
    SourcePassage(1, "The Team plan costs 12 dollars per user per month. It is billed yearly.", 0),
    SourcePassage(2, "Administrators can invite users. Only administrators may delete a workspace.", 0),
]


def test_extractive_answer_cites_best_sentences_and_counts_real_tokens():
    answer = ExtractiveAnswerGenerator().generate(question="How much does the Team plan cost?", passages=PASSAGES)
    assert answer.text.startswith("The Team plan costs 12 dollars per user per month. [1]")
    assert answer.context_tokens == sum(token_count(p.text) for p in PASSAGES)
    assert answer.answer_tokens == token_count(answer.text)


def test_extractive_answer_without_passages_says_so():
    answer = ExtractiveAnswerGenerator().generate(question="anything", passages=[])
    assert "nothing" in answer.text and answer.context_tokens == 0


class FakeUpstream:
    """Replies with the queued (status, body, delay[, trickle]) tuples in order; records the requests it got. With a
    trickle, the body goes out one byte every `trickle` seconds after the headers (a stalled or overloaded upstream
    that never lets a socket read time out)."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers["Content-Length"])
                upstream.requests.append(
                    (self.path, self.headers.get("Authorization"), json.loads(self.rfile.read(length)))
                )
                status, body, delay, *trickle = upstream.replies.pop(0)
                if delay:
                    threading.Event().wait(delay)
                payload = json.dumps(body).encode() if not isinstance(body, bytes) else body
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if trickle:
                        for index in range(len(payload)):
                            self.wfile.write(payload[index : index + 1])
                            self.wfile.flush()
                            threading.Event().wait(trickle[0])
                    else:
                        self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


COMPLETION = {
    "choices": [{"message": {"role": "assistant", "content": "It costs 12 dollars [1]."}}],
    "usage": {"prompt_tokens": 91, "completion_tokens": 9},
}


@pytest.fixture
def upstream(request):
    fake = FakeUpstream(request.param)
    yield fake
    fake.close()


@pytest.mark.parametrize("upstream", [[(200, COMPLETION, 0)]], indirect=True)
def test_chat_completion_uses_reported_usage(upstream):
    generator = ChatCompletionsAnswerGenerator(base_url=upstream.url, model="m", api_key="secret", backoff_seconds=0)
    answer = generator.generate(question="How much?", passages=PASSAGES)
    assert answer.text == "It costs 12 dollars [1]."
    assert (answer.context_tokens, answer.answer_tokens) == (91, 9)
    path, auth, body = upstream.requests[0]
    assert path == "/v1/chat/completions" and auth == "Bearer secret" and body["model"] == "m"
    assert "[2] Administrators" in body["messages"][1]["content"]


@pytest.mark.parametrize("upstream", [[(503, {}, 0), (429, {}, 0), (200, COMPLETION, 0)]], indirect=True)
def test_chat_completion_retries_transient_failures(upstream):
    generator = ChatCompletionsAnswerGenerator(base_url=upstream.url, model="m", retries=2, backoff_seconds=0)
    assert generator.generate(question="q", passages=PASSAGES).text.startswith("It costs")
    assert len(upstream.requests) == 3


@pytest.mark.parametrize("upstream", [[(500, {}, 0), (502, {}, 0)]], indirect=True)
def test_chat_completion_gives_502_after_last_retry(upstream):
    generator = ChatCompletionsAnswerGenerator(base_url=upstream.url, model="m", retries=1, backoff_seconds=0)
    with pytest.raises(UpstreamError) as caught:
        generator.generate(question="q", passages=PASSAGES)
    assert caught.value.status_code == 502 and "HTTP 502" in caught.value.message


@pytest.mark.parametrize("upstream", [[(401, {"error": "bad key"}, 0)]], indirect=True)
def test_chat_completion_client_error_is_502_without_retry(upstream):
    generator = ChatCompletionsAnswerGenerator(base_url=upstream.url, model="m", retries=3, backoff_seconds=0)
    with pytest.raises(UpstreamError, match="HTTP 401"):
        generator.generate(question="q", passages=PASSAGES)
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("upstream", [[(200, b"not json", 0)]], indirect=True)
def test_chat_completion_malformed_reply_is_502(upstream):
    generator = ChatCompletionsAnswerGenerator(base_url=upstream.url, model="m", retries=0)
    with pytest.raises(UpstreamError, match="not a chat completion"):
        generator.generate(question="q", passages=PASSAGES)


@pytest.mark.parametrize("upstream", [[(200, COMPLETION, 1.0), (200, COMPLETION, 1.0)]], indirect=True)
def test_chat_completion_timeout_is_504(upstream):
    generator = ChatCompletionsAnswerGenerator(
        base_url=upstream.url, model="m", timeout=0.2, retries=1, backoff_seconds=0
    )
    with pytest.raises(UpstreamTimeoutError) as caught:
        generator.generate(question="q", passages=PASSAGES)
    assert caught.value.status_code == 504


@pytest.mark.parametrize("upstream", [[(200, COMPLETION, 0, 0.05)]], indirect=True)
def test_chat_completion_timeout_bounds_a_trickling_reply(upstream):
    # The body trickles for about 8 s, a byte at a time, so no single socket read ever waits 0.5 s: the timeout is a
    # deadline for the whole answer, not a limit per read (gunicorn would kill the worker first, without a message).
    generator = ChatCompletionsAnswerGenerator(base_url=upstream.url, model="m", timeout=0.5, retries=0)
    started = time.monotonic()
    with pytest.raises(UpstreamTimeoutError):
        generator.generate(question="q", passages=PASSAGES)
    assert time.monotonic() - started < 4.0


SLOW_503 = (503, {}, 0.4)


@pytest.mark.parametrize("upstream", [[SLOW_503, SLOW_503, SLOW_503, (200, COMPLETION, 0)]], indirect=True)
def test_chat_completion_timeout_is_the_budget_of_every_attempt(upstream):
    # Three slow 503s of 0.4 s each would take 1.2 s: with a 1 s budget the third attempt gets what is left and the
    # turn ends as a timeout, within the budget (never LLM_TIMEOUT x attempts, beyond the web server's own timeout).
    generator = ChatCompletionsAnswerGenerator(
        base_url=upstream.url, model="m", timeout=1.0, retries=3, backoff_seconds=0
    )
    started = time.monotonic()
    with pytest.raises(UpstreamTimeoutError, match="within 1s"):
        generator.generate(question="q", passages=PASSAGES)
    assert time.monotonic() - started < 1.15
    assert len(upstream.requests) == 3


NO_CONTENT = {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "I cannot help."}}]}


@pytest.mark.parametrize("upstream", [[(200, NO_CONTENT, 0)]], indirect=True)
def test_chat_completion_without_text_is_502_not_the_word_none(upstream):
    generator = ChatCompletionsAnswerGenerator(base_url=upstream.url, model="m", retries=0)
    with pytest.raises(UpstreamError, match="no answer text"):
        generator.generate(question="q", passages=PASSAGES)


@pytest.mark.parametrize("upstream", [[(200, b"x" * (5 * 1024 * 1024), 0)]], indirect=True)
def test_chat_completion_oversize_reply_is_502(upstream):
    generator = ChatCompletionsAnswerGenerator(base_url=upstream.url, model="m", retries=0)
    with pytest.raises(UpstreamError, match="larger than"):
        generator.generate(question="q", passages=PASSAGES)


def test_chat_completion_cut_off_reply_is_502_not_500():
    # Headers promise 1,000 bytes, then the connection closes after 10: urllib3's own error, not requests'.
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        for _ in range(2):
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{"choices"')

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    generator = ChatCompletionsAnswerGenerator(
        base_url=f"http://127.0.0.1:{listener.getsockname()[1]}/v1", model="m", retries=1, backoff_seconds=0
    )
    try:
        with pytest.raises(UpstreamError, match="unreachable"):
            generator.generate(question="q", passages=PASSAGES)
    finally:
        listener.close()


def test_unreachable_upstream_is_502():
    generator = ChatCompletionsAnswerGenerator(base_url="http://127.0.0.1:1/v1", model="m", retries=0)
    with pytest.raises(UpstreamError, match="unreachable"):
        generator.generate(question="q", passages=PASSAGES)


def test_generator_choice_follows_settings(settings):
    settings.LLM_BASE_URL, settings.LLM_MODEL = "", ""
    assert isinstance(answer_generator(), ExtractiveAnswerGenerator)
    settings.LLM_BASE_URL, settings.LLM_MODEL = "http://llm.internal/v1", "small"
    assert isinstance(answer_generator(), ChatCompletionsAnswerGenerator)
