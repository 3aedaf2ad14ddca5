"""Answer generation behind one interface.

- `ExtractiveAnswerGenerator` (the default, no network): the answer is the retrieved chunks' sentences that
  share the most salient words with the question, in order of relevance, each cited as [n] by its source.
- `ChatCompletionsAnswerGenerator`: any OpenAI-compatible `/chat/completions` endpoint (`LLM_BASE_URL`,
  `LLM_MODEL`, `LLM_API_KEY`), with a timeout, retries with backoff on transient failures, and a clear 502 or 504
  when the upstream fails.

Context tokens are counted with the embedding model's tokenizer (or taken from the LLM's reported usage), so the
tokens a served duplicate saves are real counts.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import requests
from django.conf import settings

from conversations.decisions import content_words
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


class ChatCompletionsAnswerGenerator:
    """An OpenAI-compatible chat-completions backend. Retries connection errors, 429 and 5xx with backoff; any
    other failure is a 502 and a timeout after the last attempt is a 504, both with a message for the client."""

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

    def generate(self, *, question: str, passages: Sequence[SourcePassage]) -> GeneratedAnswer:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = {"model": self.model, "messages": self._messages(question, passages), "temperature": 0}
        last_error: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_seconds * (2 ** (attempt - 1)))
            try:
                response = requests.post(self.url, json=body, headers=headers, timeout=self.timeout)
            except requests.Timeout as exc:
                last_error = exc
                continue
            except requests.ConnectionError as exc:
                last_error = exc
                continue
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
                f"The answer service did not reply within {self.timeout:g}s ({self.retries + 1} attempts); retry later."
            )
        if isinstance(last_error, UpstreamError):
            raise last_error
        raise UpstreamError(f"The answer service is unreachable: {last_error}")

    def _parse(self, response: requests.Response, passages: Sequence[SourcePassage]) -> GeneratedAnswer:
        try:
            payload = response.json()
            text = str(payload["choices"][0]["message"]["content"]).strip()
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise UpstreamError("The answer service sent a reply that is not a chat completion.") from exc
        usage = payload.get("usage") or {}
        prompt_tokens = usage.get("prompt_tokens")
        completion_tokens = usage.get("completion_tokens")
        return GeneratedAnswer(
            text=text,
            context_tokens=int(prompt_tokens) if isinstance(prompt_tokens, int) else context_tokens_of(passages),
            answer_tokens=int(completion_tokens) if isinstance(completion_tokens, int) else token_count(text),
        )


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
