"""Answer generation behind one interface.

- `ExtractiveAnswerGenerator` (the default, no network): the answer is the retrieved chunks' sentences that
  share the most salient words with the question, in order of relevance, each cited as [n] by its source.
- `ChatCompletionsAnswerGenerator`: any OpenAI-compatible `/chat/completions` endpoint (`LLM_BASE_URL`,
  `LLM_MODEL`, `LLM_API_KEY`), with one deadline for the whole answer (`LLM_TIMEOUT`), retries with backoff on
  transient failures within it, and a clear 502 or 504 when the upstream fails.

Context tokens are counted with the embedding model's tokenizer (or taken from the LLM's reported usage), so the
tokens a served duplicate saves are real counts.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Protocol

import requests
import urllib3
from django.conf import settings

from conversations.question_pairs import content_words
from kbplatform.errors import UpstreamError, UpstreamTimeoutError
from retrieval.embeddings import token_count, token_counts

logger = logging.getLogger(__name__)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True)
class SourcePassage:
    chunk_id: int
    text: str
    token_count: int


@dataclass(frozen=True)
class GeneratedAnswer:
    text: str
    context_tokens: int  # tokens of the passages handed to the generator (the prompt's context)
    answer_tokens: int


class AnswerGenerator(Protocol):
    def generate(self, *, question: str, passages: Sequence[SourcePassage]) -> GeneratedAnswer: ...


def context_tokens_of(passages: Sequence[SourcePassage]) -> int:
    missing = [p.text for p in passages if not p.token_count]
    counted = iter(token_counts(missing)) if missing else iter(())
    return sum(p.token_count or next(counted) for p in passages)


class ExtractiveAnswerGenerator:
    """Composes the answer from the passages' best sentences. Deterministic and local: it never fails upstream."""

    max_sentences = 3

    def generate(self, *, question: str, passages: Sequence[SourcePassage]) -> GeneratedAnswer:
        context_tokens = context_tokens_of(passages)
        if not passages:
            text = "I found nothing in the knowledge base that answers this."
            return GeneratedAnswer(text=text, context_tokens=0, answer_tokens=token_count(text))
        question_words = content_words(question)
        scored: list[tuple[float, int, int, str]] = []
        for rank, passage in enumerate(passages):
            for position, sentence in enumerate(s.strip() for s in _SENTENCE_END.split(passage.text)):
                if len(sentence) < 20:
                    continue
                words = content_words(sentence)
                overlap = len(question_words & words) / (len(question_words) or 1)
                # Overlap first; on a tie the better-ranked passage and the earlier sentence win.
                scored.append((overlap - 0.01 * rank - 0.001 * position, rank, position, sentence))
        scored.sort(key=lambda item: -item[0])
        chosen = scored[: self.max_sentences]
        if not chosen:
            chosen = [(0.0, 0, 0, passages[0].text.strip()[:500])]
        text = " ".join(f"{sentence} [{rank + 1}]" for _, rank, _, sentence in chosen)
        return GeneratedAnswer(text=text, context_tokens=context_tokens, answer_tokens=token_count(text))


# A chat completion is a few kilobytes; a reply past this is a broken (or hostile) upstream, not an answer.
REPLY_MAX_BYTES = 4 * 1024 * 1024
# The exchanges with the answer service run on these threads so that a turn can stop waiting at its deadline
# whatever the upstream does (requests' timeout bounds each socket read, not the reply: a reply that trickles in a
# byte at a time never trips it). A thread left behind ends at the same deadline, at its next read.
_EXCHANGES = ThreadPoolExecutor(max_workers=16, thread_name_prefix="answer-service")


@dataclass(frozen=True)
class _Reply:
    status_code: int
    content: bytes


class _ReplyTooLarge(Exception):
    pass


class ChatCompletionsAnswerGenerator:
    """An OpenAI-compatible chat-completions backend. Retries connection errors, 429 and 5xx with backoff; any
    other failure is a 502, and running out of time a 504, both with a message for the client. `timeout` is the
    budget of the whole answer (every attempt and the pauses between them), so a turn never waits longer than
    `LLM_TIMEOUT` for the answer service: keep it below the web server's own request timeout."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout: float = 30.0,
        retries: int = 2,
        backoff_seconds: float = 0.5,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.backoff_seconds = backoff_seconds

    def _messages(self, question: str, passages: Sequence[SourcePassage]) -> list[dict]:
        context = "\n\n".join(f"[{i + 1}] {p.text}" for i, p in enumerate(passages))
        system = (
            "Answer the user's question using only the numbered passages. Cite passages as [n]. "
            "If they do not contain the answer, say so."
        )
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Passages:\n{context}\n\nQuestion: {question}"},
        ]

    def _exchange(self, *, body: dict, headers: dict, deadline: float) -> _Reply:
        """One request and its whole reply, read by `deadline` (requests.Timeout past it)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise requests.Timeout("no time left for the answer service")
        with requests.post(
            self.url, json=body, headers=headers, timeout=(min(remaining, 10.0), remaining), stream=True
        ) as response:
            chunks: list[bytes] = []
            size = 0
            try:
                while chunk := response.raw.read1(64 * 1024, decode_content=True):
                    size += len(chunk)
                    if size > REPLY_MAX_BYTES:
                        raise _ReplyTooLarge
                    if time.monotonic() > deadline:
                        raise requests.Timeout("the reply did not arrive in time")
                    chunks.append(chunk)
            # Reading the raw body raises urllib3's errors, not requests': the same meaning, the same handling.
            except urllib3.exceptions.ReadTimeoutError as exc:
                raise requests.Timeout(str(exc)) from exc
            except urllib3.exceptions.HTTPError as exc:
                raise requests.ConnectionError(f"the reply broke off ({exc})") from exc
            return _Reply(status_code=response.status_code, content=b"".join(chunks))

    def generate(self, *, question: str, passages: Sequence[SourcePassage]) -> GeneratedAnswer:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = {"model": self.model, "messages": self._messages(question, passages), "temperature": 0}
        deadline = time.monotonic() + self.timeout
        last_error: Exception | None = None
        attempts = 0
        for attempt in range(self.retries + 1):
            if attempt:
                pause = self.backoff_seconds * (2 ** (attempt - 1))
                if time.monotonic() + pause >= deadline:
                    break
                time.sleep(pause)
            attempts += 1
            exchange = _EXCHANGES.submit(self._exchange, body=body, headers=headers, deadline=deadline)
            try:
                response = exchange.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                exchange.cancel()
                last_error = requests.Timeout("deadline")
                break
            except requests.Timeout as exc:
                last_error = exc
                continue
            except requests.ConnectionError as exc:
                last_error = exc
                continue
            except _ReplyTooLarge:
                raise UpstreamError(
                    f"The answer service sent a reply larger than {REPLY_MAX_BYTES // (1024 * 1024)} MiB."
                ) from None
            if response.status_code == 429 or response.status_code >= 500:
                last_error = UpstreamError(f"The answer service returned HTTP {response.status_code}.")
                continue
            if response.status_code >= 400:
                raise UpstreamError(
                    f"The answer service refused the request (HTTP {response.status_code}).",
                    extra={"upstream_status": response.status_code},
                )
            return self._parse(response, passages)
        if isinstance(last_error, requests.Timeout):
            raise UpstreamTimeoutError(
                f"The answer service did not reply within {self.timeout:g}s ({attempts} attempt"
                f"{'s' if attempts != 1 else ''}); retry later."
            )
        if isinstance(last_error, UpstreamError):
            raise last_error
        raise UpstreamError(f"The answer service is unreachable: {last_error}")

    def _parse(self, response: _Reply, passages: Sequence[SourcePassage]) -> GeneratedAnswer:
        try:
            payload = json.loads(response.content)
            content = payload["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise UpstreamError("The answer service sent a reply that is not a chat completion.") from exc
        if not isinstance(content, str) or not content.strip():
            # A refusal or a tool call comes with no text: never an answer to store and serve again ("None").
            raise UpstreamError("The answer service sent no answer text.")
        text = content.strip()
        usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        prompt_tokens = usage.get("prompt_tokens")
        completion_tokens = usage.get("completion_tokens")
        return GeneratedAnswer(
            text=text,
            context_tokens=int(prompt_tokens) if _is_count(prompt_tokens) else context_tokens_of(passages),
            answer_tokens=int(completion_tokens) if _is_count(completion_tokens) else token_count(text),
        )


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def answer_generator() -> AnswerGenerator:
    """The configured generator: chat completions when `LLM_BASE_URL` and `LLM_MODEL` are set, else extractive."""
    if settings.LLM_BASE_URL and settings.LLM_MODEL:
        return ChatCompletionsAnswerGenerator(
            base_url=settings.LLM_BASE_URL,
            model=settings.LLM_MODEL,
            api_key=settings.LLM_API_KEY,
            timeout=settings.LLM_TIMEOUT,
        )
    return ExtractiveAnswerGenerator()
