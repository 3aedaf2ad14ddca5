"""Answer generators: the extractive default, and the chat-completions backend against a local fake upstream."""

from __future__ import annotations

import json
import threading
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
    """Replies with the queued (status, body, delay) tuples in order; records the requests it got."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                length = int(self.headers["Content-Length"])
                upstream.requests.append(
                    (self.path, self.headers.get("Authorization"), json.loads(self.rfile.read(length)))
                )
                status, body, delay = upstream.replies.pop(0)
                if delay:
                    threading.Event().wait(delay)
                payload = json.dumps(body).encode() if not isinstance(body, bytes) else body
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
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


def test_unreachable_upstream_is_502():
    generator = ChatCompletionsAnswerGenerator(base_url="http://127.0.0.1:1/v1", model="m", retries=0)
    with pytest.raises(UpstreamError, match="unreachable"):
        generator.generate(question="q", passages=PASSAGES)


def test_generator_choice_follows_settings(settings):
    settings.LLM_BASE_URL, settings.LLM_MODEL = "", ""
    assert isinstance(answer_generator(), ExtractiveAnswerGenerator)
    settings.LLM_BASE_URL, settings.LLM_MODEL = "http://llm.internal/v1", "small"
    assert isinstance(answer_generator(), ChatCompletionsAnswerGenerator)
