"""Answer generation behind one interface, streamed as it is made.

- `ExtractiveAnswerGenerator` (the default, no network): the answer is the retrieved chunks' sentences that
  share the most salient words with the question, in order of relevance, each cited as [n] by its source; it
  streams one sentence at a time.
- `ChatCompletionsAnswerGenerator`: any OpenAI-compatible `/chat/completions` endpoint (`LLM_BASE_URL`,
  `LLM_MODEL`, `LLM_API_KEY`) through the `openai` SDK, always asked to stream, with one deadline for the whole
  answer (`LLM_TIMEOUT`), retries with backoff on transient failures within it (only before the first piece of
  text: text already passed on cannot be taken back), and a clear 502 or 504 when the upstream fails. It is given
  the conversation's recent turns (`history`) and can rewrite a follow-up into a standalone question.

`stream()` yields `AnswerDelta`s and, last, the `GeneratedAnswer`; `generate()` is the same stream collected, so a
turn answered as JSON and one answered as Server-Sent Events go through one path. Closing a stream early (the
client went away) closes the upstream request.

Context tokens are counted with the embedding model's tokenizer (or taken from the LLM's reported usage), so the
tokens a served duplicate saves are real counts.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import httpx2
import openai
from django.conf import settings

from conversations.dedup import chinese_text, other_languages
from conversations.dedup.question_pairs import content_words, words_read
from conversations.models import COUNT_MAX
from conversations.turn import languages
from conversations.turn.languages import ONE_LANGUAGE_SCRIPTS, script_of
from kbplatform.errors import UpstreamError, UpstreamTimeoutError
from kbplatform.text import marks_as_letters, text_storable
from retrieval.embeddings import token_count, token_counts

logger = logging.getLogger(__name__)

# A sentence ends at ".", "!" or "?" before a space, and so at the full stops and question marks of the scripts that
# write their own (the Devanagari danda and double danda, the Arabic question mark and Urdu full stop, the Armenian full
# stop, the Myanmar and Khmer sections, the Ethiopic full stop); at a Chinese or Japanese full stop, "!" or "?" (no
# space follows them); and at a line break that is left once `_unwrapped` has joined the wrapped lines: a paragraph
# break, a heading or list item ending, or a line that begins one. A single line break inside a paragraph is where the
# writer's editor wrapped the line ("... arrives the next\nworking day ..."), not the end of a sentence. Greek's
# question mark is the Latin semicolon, which other languages write inside a sentence: it ends none.
_SENTENCE_END = re.compile(r"(?<=[.!?\u0964\u0965\u061f\u06d4\u0589\u104b\u17d4\u1362])\s+|(?<=[。！？])\s*|\n\s*")
# A line that begins a block of its own: a heading, a quote, a list item.
_BLOCK_START = re.compile(r"[#>*\-•]|\d+[.)]\s")
_LIST_ITEM = re.compile(r"[*\-•]\s|\d+[.)]\s")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7a3\uff00-\uffef]")
# Fewest characters a sentence needs to be shown: a fragment says nothing ("1."). Chinese and Japanese say as much in
# about a third of the characters.
_SENTENCE_MIN_CHARS, _CJK_SENTENCE_MIN_CHARS = 20, 6


def _unwrapped(text: str) -> str:
    """`text` with the line breaks inside its paragraphs read as spaces (none between two CJK characters). A break
    stays before a line that begins a block, after a heading (one line always), and after a list item unless the next
    line is indented to continue it: "- Returns are free\nGift cards are not refundable." is two sentences, where a
    wrapped item's continuation is written indented under it."""
    lines = [line.rstrip(" \t") for line in text.split("\n")]
    out = lines[:1]
    in_item = bool(lines) and bool(_LIST_ITEM.match(lines[0].lstrip()))
    for before, line in zip(lines, lines[1:], strict=False):
        stripped = line.lstrip()
        starts_block = not stripped or bool(_BLOCK_START.match(stripped))
        ends_block = not before.strip() or before.lstrip().startswith("#") or (in_item and stripped == line)
        if starts_block or ends_block:
            out.append("\n" + line)
            in_item = bool(_LIST_ITEM.match(stripped)) if stripped else False
            continue
        joiner = "" if before and _CJK.match(before[-1]) and _CJK.match(stripped[0]) else " "
        out.append(joiner + stripped)
    return "".join(out)


def sentences_of(text: str) -> list[str]:
    """The sentences of a passage, as the extractive answer quotes them: wrapped lines joined, fragments and Markdown
    headings left out (a heading names a topic, it answers nothing)."""
    sentences = []
    for sentence in _SENTENCE_END.split(_unwrapped(text)):
        sentence = sentence.strip()
        if sentence.startswith("#"):
            continue
        shortest = _CJK_SENTENCE_MIN_CHARS if _CJK.search(sentence) else _SENTENCE_MIN_CHARS
        if len(sentence) >= shortest:
            sentences.append(sentence)
    return sentences


@dataclass(frozen=True)
class SourcePassage:
    chunk_id: int
    text: str
    token_count: int
    # The searched question's cosine to the passage under the knowledge base's model; None when not known.
    similarity: float | None = None


@dataclass(frozen=True)
class HistoryTurn:
    """One earlier exchange of the conversation, as the model is shown it."""

    question: str
    answer: str


@dataclass(frozen=True)
class GeneratedAnswer:
    text: str
    context_tokens: int  # tokens of the prompt's context (the passages, or the LLM's reported prompt tokens)
    answer_tokens: int


@dataclass(frozen=True)
class AnswerDelta:
    """A piece of the answer, in order: the answer is the pieces joined."""

    text: str


AnswerPiece = AnswerDelta | GeneratedAnswer


class AnswerGenerator(Protocol):
    # Whether the generator reads `history` (the turn loads it only for one that does) and can `rewrite`.
    uses_history: bool
    # Whether `answerable` reads a similarity floor (the turn asks for the passages' cosines only for one that does).
    uses_similarity_floor: bool

    def stream(
        self, *, question: str, passages: Sequence[SourcePassage], history: Sequence[HistoryTurn] = ()
    ) -> Iterator[AnswerPiece]: ...

    def generate(
        self, *, question: str, passages: Sequence[SourcePassage], history: Sequence[HistoryTurn] = ()
    ) -> GeneratedAnswer: ...

    def rewrite(self, *, question: str, history: Sequence[HistoryTurn]) -> str: ...

    def answerable(
        self,
        *,
        question: str,
        passages: Sequence[SourcePassage],
        question_read: bool = True,
        similarity_floor: float | None = None,
    ) -> bool:
        """Whether an answer to `question` can be made from `passages` at all, known before any text is made
        (`question_read`: whether the model that found them read the question, `embeddings.text_readable`;
        `similarity_floor`: the cosine under which a passage is too far from the question in the knowledge base's model
        to answer it, `answer_similarity_floor`). A turn whose passages cannot answer it shows none of them and consumes
        none: its answer says the knowledge base holds nothing on it, and a repeat of the question searches again."""
        ...


# The replies in English (`languages.reply` gives them in the question's language): nothing answers the question, and
# nothing but what the exclusion window left out (what earlier turns showed) answers it.
NOTHING_FOUND = languages.reply(languages.NOTHING_FOUND, "en")
NOTHING_NEW = languages.reply(languages.NOTHING_NEW, "en")


# A citation of passages as the model is told to write it ("[2]"), and as models also write it: several in one
# ("[1, 3]"), fullwidth brackets ("【1】", "［1］", as Chinese text writes them), a footnote ("[^1]").
_CITATION = re.compile(r"[\[【［]\^?\s*(\d{1,3}(?:\s*[,，、]\s*\d{1,3})*)\s*[\]】］]")
_CITED_NUMBER = re.compile(r"\d+")


def answer_cites(text: str, passages: int) -> bool:
    """Whether `text` cites at least one of `passages` numbered passages. A generated answer citing none is what the
    model is told to write when they do not hold the answer (`ChatCompletionsAnswerGenerator`): it is recorded as
    citing nothing, so that a repeat of the question is searched again rather than told the same from memory."""
    return any(
        1 <= int(number) <= passages for group in _CITATION.findall(text) for number in _CITED_NUMBER.findall(group)
    )


def context_tokens_of(passages: Sequence[SourcePassage]) -> int:
    missing = [p.text for p in passages if not p.token_count]
    counted = iter(token_counts(missing)) if missing else iter(())
    return sum(p.token_count or next(counted) for p in passages)


def answer_collect(pieces: Iterator[AnswerPiece]) -> GeneratedAnswer:
    """The whole answer of a stream (its last piece)."""
    final = None
    for piece in pieces:
        if isinstance(piece, GeneratedAnswer):
            final = piece
    if final is None:
        raise UpstreamError("The answer stream ended without an answer.")
    return final


class ExtractiveAnswerGenerator:
    """Composes the answer from the passages' best sentences. Deterministic and local: it never fails upstream.
    It reads no history and rewrites nothing: a follow-up is searched with its own words."""

    max_sentences = 3
    uses_history = False
    uses_similarity_floor = True

    def stream(
        self, *, question: str, passages: Sequence[SourcePassage], history: Sequence[HistoryTurn] = ()
    ) -> Iterator[AnswerPiece]:
        if not self.answerable(question=question, passages=passages):
            nothing = languages.reply(languages.NOTHING_FOUND, languages.reply_language(question))
            yield AnswerDelta(nothing)
            yield GeneratedAnswer(text=nothing, context_tokens=0, answer_tokens=token_count(nothing))
            return
        context_tokens = context_tokens_of(passages)
        chosen = sentences_chosen(question, passages, self.max_sentences)
        cited = [f"{sentence} [{rank + 1}]" for rank, sentence in chosen]
        for index, sentence in enumerate(cited):
            yield AnswerDelta(sentence if index == 0 else " " + sentence)
        text = " ".join(cited)
        yield GeneratedAnswer(text=text, context_tokens=context_tokens, answer_tokens=token_count(text))

    def generate(
        self, *, question: str, passages: Sequence[SourcePassage], history: Sequence[HistoryTurn] = ()
    ) -> GeneratedAnswer:
        return answer_collect(self.stream(question=question, passages=passages, history=history))

    def rewrite(self, *, question: str, history: Sequence[HistoryTurn]) -> str:
        return question

    def answerable(
        self,
        *,
        question: str,
        passages: Sequence[SourcePassage],
        question_read: bool = True,
        similarity_floor: float | None = None,
    ) -> bool:
        """False when no sentence of `passages` shares a content word with `question` (`_words_named`: Chinese read
        in jieba's words), unless the question is in another language and the model read it. Such a sentence would be
        quoted for its passage's rank alone, which is what a question the knowledge base does not cover (the weather,
        of a help centre) retrieves; so would any sentence for a question naming nothing ("what is it?"), which this
        generator, reading no history, cannot place. A question in another language than the passages shares no word
        with them whatever it asks: a model that read it (a multilingual one) found them by meaning, and they are
        quoted; one that did not (Chinese to the bundled model) found them by nothing. The similarity floor is read for
        an unread question too: its cosine says little of what it asks, but the bundled model still puts text of
        unknown pieces far from English (a Chinese question sharing only a number or a Latin word with an English
        page is answered nothing) and near other such text."""
        sentences = [sentence for _, _, sentence in _quotable(passages)]
        if not sentences or _all_far(passages, similarity_floor):
            return False
        question_words = _words_named(question)
        if any(_names_in_common(question_words, _words_named(sentence)) for sentence in sentences):
            return True
        return question_read and not _one_language(question, sentences)


def sentences_chosen(question: str, passages: Sequence[SourcePassage], count: int) -> list[tuple[int, str]]:
    """The `count` sentences the extractive answer quotes, as (passage rank, sentence), in the order it quotes them.
    First the sentence of the best-ranked passage that shares a word with `question` (`_words_named`) that shares the
    most of them: the search ranked the passages on the whole question, by meaning and by words, and one shared word
    is a weak sign (the Chinese segmenter cuts a question into short common words, 收到, 时候, so a sentence of a far
    passage that shares one, "没有收到邮件", would otherwise come first). Then the others by the share of the
    question's words they hold, the better-ranked passage and the earlier sentence breaking ties: the rest of the
    answer may draw on every passage, as the question's other parts may be answered elsewhere."""
    question_words = _words_named(question)
    ordered: list[tuple[float, int, int, str]] = []
    for rank, position, sentence in _quotable(passages):
        shared = len(question_words & _words_named(sentence)) / (len(question_words) or 1)
        ordered.append((-shared, rank, position, sentence))
    ordered.sort(key=lambda item: item[:3])
    anchored = [item for item in ordered if item[0] < 0]
    if anchored:
        best_rank = min(item[1] for item in anchored)
        first = next(item for item in anchored if item[1] == best_rank)
        ordered.remove(first)
        ordered.insert(0, first)
    return [(rank, sentence) for _, rank, _, sentence in ordered[:count]]


# The cosine of a question to the nearest passage a search found, under which no passage is taken to answer it, per
# embedding model (cosines of two models are on scales of their own): the highest that answers nothing to at most two
# in a hundred more of the questions a knowledge base covers, on data apart from what judges it (`bench/answer_floor.py
# --without-floor`; docs/conversations.md, "Answers and tokens"). A model not listed has no floor, only the
# shared-word rule: use-multilingual-v3's, chosen the same way, cost more than that where it was judged and was not
# measured on Chinese passages.
ANSWER_SIMILARITY_FLOORS: dict[str, float] = {"all-MiniLM-L6-v2": 0.30}


def answer_similarity_floor(model: str) -> float | None:
    """The similarity floor of the extractive answer for knowledge bases of `model`, or None (no floor): the
    deployment's (settings.ANSWER_SIMILARITY_FLOORS, which may also remove one), else the shipped one."""
    if model in settings.ANSWER_SIMILARITY_FLOORS:
        return settings.ANSWER_SIMILARITY_FLOORS[model]
    return ANSWER_SIMILARITY_FLOORS.get(model)


def _all_far(passages: Sequence[SourcePassage], floor: float | None) -> bool:
    """Whether every passage whose similarity is known is under `floor`, and one is known. A lexical search's hit has
    a word of the question by construction, whatever it is about; its vector's cosine says how near it is in meaning."""
    if floor is None:
        return False
    known = [passage.similarity for passage in passages if passage.similarity is not None]
    return bool(known) and max(known) < floor


_HANGUL_WORD = re.compile(r"[\uac00-\ud7a3]{3,}")
# A run of Thai letters as `marks_as_letters` leaves it (consonants and the vowels written on the line).
_THAI_RUN = re.compile("[\u0e01-\u0e4f]{3,}")
_THAI_LETTER = re.compile("[\u0e01-\u0e4f]")


def _names_in_common(first: frozenset[str], second: frozenset[str]) -> bool:
    """Whether two texts name a thing in common (`_words_named`): a word, or in Thai two runs of three letters (one is
    about a syllable, which unrelated Thai questions and pages share as often as not)."""
    shared = first & second
    thai = sum(1 for word in shared if _THAI_LETTER.match(word))
    return len(shared) > thai or thai >= 2


@lru_cache(maxsize=1 << 12)
def _words_named(text: str) -> frozenset[str]:
    """The content words of `text`; of a Korean word also its first two syllables: Korean writes a word's particle
    and ending onto it (환불은, 환불을: "the refund" as subject and as object), and most of its nouns are two
    syllables, so two forms of one word share them; of a three-character Chinese word also its last two when they are
    a word of their own (`chinese_text.word_tail`): "能开发票吗" names 发票 as a page's "开具电子发票" does. Not every
    word inside a longer one, as jieba's search mode reads it: that also quoted pages for questions they do not
    answer (分期付款 names 付款; BENCHMARKS.md, "What the extractive answer quotes"). Thai writes no space between
    its words, and the duplicate rules' reading cuts it at each vowel mark into pieces that are no words: Thai text
    names instead each run of three of its letters (without the marks above and below the line, which users leave out
    or place otherwise), about a syllable, and `_names_in_common` asks two of them for a word."""
    words = content_words(text)
    more = {word[:2] for word in words if _HANGUL_WORD.fullmatch(word)}
    if _THAI_LETTER.search(text):
        words = frozenset(word for word in words if not _THAI_LETTER.search(word))
        for run in _THAI_RUN.findall(marks_as_letters(text)):
            more.update(run[index : index + 3] for index in range(len(run) - 2))
    for word in words:
        tail = chinese_text.word_tail(word)
        if tail and content_words(tail) == {tail}:
            more.add(tail)
    return words | more if more else words


def _one_language(question: str, sentences: Sequence[str]) -> bool:
    """Whether `question` is read as written in the language of `sentences`, so that sharing no content word with
    them says they do not answer it: the same script, and, in a script several languages write (Latin, Cyrillic,
    Arabic), both English (`other_languages.reads_as_english`: one of its function words no other language writes).
    `content_words` leaves out English's stopwords and reads English's endings: two texts of another language that
    share no content word may name one thing in two forms ("kártyámat" / "Kártya", "пароль" / "пароля") or share only
    words English stops too (Hungarian's article "a"), so such a question is quoted what its model found, as one in
    another language is. A question in none of English's function words ("refund status?") reads as another language
    than English passages: quoted too."""
    script = script_of(question)
    if not script or script != script_of(" ".join(sentences)):
        return False
    if script in ONE_LANGUAGE_SCRIPTS:
        return True
    english = sum(1 for sentence in sentences if other_languages.reads_as_english(words_read(sentence)))
    return other_languages.reads_as_english(words_read(question)) and 2 * english >= len(sentences)


def _quotable(passages: Sequence[SourcePassage]) -> list[tuple[int, int, str]]:
    """What the extractive answer may quote, as (passage rank, position, sentence): the passages' sentences, or, when
    none has a sentence long enough, the first passage's text whole."""
    quotable = [
        (rank, position, sentence)
        for rank, passage in enumerate(passages)
        for position, sentence in enumerate(sentences_of(passage.text))
    ]
    if not quotable and passages:
        quotable = [(0, 0, passages[0].text.strip()[:500])]
    return quotable


# A chat completion is a few kilobytes; a reply past this is a broken (or hostile) upstream, not an answer. Counted on
# the bytes read off the socket, so it also bounds a reply that never ends a line.
REPLY_MAX_BYTES = 4 * 1024 * 1024
_REWRITE_MAX_CHARS = 1000


class _ReplyTooLarge(Exception):
    pass


class _CappedByteStream(httpx2.SyncByteStream):
    def __init__(self, inner: httpx2.SyncByteStream, limit: int) -> None:
        self.inner, self.limit = inner, limit

    def __iter__(self) -> Iterator[bytes]:
        size = 0
        for chunk in self.inner:
            size += len(chunk)
            if size > self.limit:
                raise _ReplyTooLarge
            yield chunk

    def close(self) -> None:
        self.inner.close()


class _CappedTransport(httpx2.HTTPTransport):
    """Every reply body is read through a counter that stops it at REPLY_MAX_BYTES."""

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = super().handle_request(request)
        response.stream = _CappedByteStream(response.stream, REPLY_MAX_BYTES)
        return response


@lru_cache(maxsize=8)
def _client(base_url: str, api_key: str) -> openai.OpenAI:
    """One SDK client (and its connection pool) per upstream. The SDK's own retries are off: they wait on their own
    schedule with no overall deadline, so the attempts are made by `ChatCompletionsAnswerGenerator` within one."""
    return openai.OpenAI(
        base_url=base_url,
        # The SDK refuses to start without a key; an upstream on a private network may need none, and is then sent
        # no Authorization header at all (each request omits it).
        api_key=api_key or "none",
        max_retries=0,
        http_client=httpx2.Client(transport=_CappedTransport()),
    )


_END = object()


class ChatCompletionsAnswerGenerator:
    """An OpenAI-compatible chat-completions backend. Retries connection errors, 429 and 5xx with backoff while no
    text has come yet; any other failure is a 502, and running out of time a 504, both with a message for the
    client. `timeout` is the budget of the whole answer (every attempt and the pauses between them), so a turn never
    waits longer than `LLM_TIMEOUT` for the answer service: keep it below the web server's own request timeout."""

    uses_history = True
    uses_similarity_floor = False  # it reads the passages and says when they do not answer

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout: float = 30.0,
        retries: int = 2,
        backoff_seconds: float = 0.5,
        rewrite_timeout: float = 10.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.rewrite_timeout = rewrite_timeout
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.backoff_seconds = backoff_seconds

    def _messages(self, question: str, passages: Sequence[SourcePassage], history: Sequence[HistoryTurn]) -> list[dict]:
        context = "\n\n".join(f"[{i + 1}] {p.text}" for i, p in enumerate(passages))
        system = (
            "Answer the user's question using only the numbered passages. Cite passages as [n]. "
            "If they do not contain the answer, say so. Earlier turns of the conversation are given for context."
        )
        messages: list[dict] = [{"role": "system", "content": system}]
        for turn in history:
            messages += [{"role": "user", "content": turn.question}, {"role": "assistant", "content": turn.answer}]
        messages.append({"role": "user", "content": f"Passages:\n{context}\n\nQuestion: {question}"})
        return messages

    def _exchange(self, *, messages: list[dict], deadline: float, pieces: queue.Queue, cancel: threading.Event) -> None:
        """One streamed request, its chunks put on `pieces` (text, usage dicts), then `_END` or the exception. Runs
        on a thread of its own so that the caller can stop waiting at the deadline whatever the upstream does (the
        SDK's timeout bounds each socket read, not the reply: a reply that trickles in never trips it)."""
        stream = None
        try:
            stream = _client(self.base_url, self.api_key).chat.completions.create(
                model=self.model,
                messages=messages,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_headers=None if self.api_key else {"Authorization": openai.omit},
                timeout=httpx2.Timeout(max(0.001, deadline - time.monotonic()), connect=min(10.0, self.timeout)),
            )
            finished = False
            for chunk in stream:
                if cancel.is_set():
                    return
                if chunk.usage is not None:
                    pieces.put(
                        {"prompt_tokens": chunk.usage.prompt_tokens, "completion": chunk.usage.completion_tokens}
                    )
                for choice in chunk.choices or ():
                    content = choice.delta.content if choice.delta is not None else None
                    if content:
                        pieces.put(content)
                    finished = finished or choice.finish_reason is not None
            if not finished:
                # The connection closed before the model said it was done: a cut answer, not a short one.
                raise httpx2.RemoteProtocolError("the reply ended before the answer did")
            pieces.put(_END)
        except Exception as exc:  # noqa: BLE001 - handed to the waiting turn, which classifies it
            pieces.put(exc)
        finally:
            if stream is not None:
                stream.close()

    def stream(
        self, *, question: str, passages: Sequence[SourcePassage], history: Sequence[HistoryTurn] = ()
    ) -> Iterator[AnswerPiece]:
        deadline = time.monotonic() + self.timeout
        messages = self._messages(question, passages, history)
        parts: list[str] = []
        usage: dict = {}
        yield from self._attempts(messages=messages, deadline=deadline, parts=parts, usage=usage)
        text = "".join(parts).strip()
        if not text:
            # A refusal or a tool call comes with no text: never an answer to store and serve again ("None").
            raise UpstreamError("The answer service sent no answer text.")
        prompt_tokens, completion_tokens = usage.get("prompt_tokens"), usage.get("completion")
        yield GeneratedAnswer(
            text=text,
            context_tokens=int(prompt_tokens) if _is_count(prompt_tokens) else context_tokens_of(passages),
            answer_tokens=int(completion_tokens) if _is_count(completion_tokens) else token_count(text),
        )

    def _attempts(
        self, *, messages: list[dict], deadline: float, parts: list[str], usage: dict
    ) -> Iterator[AnswerDelta]:
        """Up to 1 + `retries` exchanges within `deadline`, passing on their text as it comes; a failure after the
        first piece of text ends the answer (a retry would say it twice)."""
        last_error: Exception | None = None
        attempts = 0
        for attempt in range(self.retries + 1):
            if attempt:
                pause = self.backoff_seconds * (2 ** (attempt - 1))
                if time.monotonic() + pause >= deadline:
                    break
                time.sleep(pause)
            attempts += 1
            pieces: queue.Queue = queue.Queue()
            cancel = threading.Event()
            threading.Thread(
                target=self._exchange,
                kwargs={"messages": messages, "deadline": deadline, "pieces": pieces, "cancel": cancel},
                name="answer-service",
                daemon=True,
            ).start()
            try:
                while True:
                    try:
                        piece = pieces.get(timeout=max(0.0, deadline - time.monotonic()))
                    except queue.Empty:
                        last_error = TimeoutError("deadline")
                        break
                    if piece is _END:
                        return
                    if isinstance(piece, dict):
                        usage.update(piece)
                        continue
                    if isinstance(piece, str):
                        # Stored as sent, and served again: what no database or JSON holds (NUL, a lone surrogate
                        # from a "\ud800" escape) is taken out here, so the client is streamed what is stored.
                        piece = text_storable(piece)
                        if piece:
                            parts.append(piece)
                            yield AnswerDelta(piece)
                        continue
                    # An exception from the exchange.
                    if parts:
                        raise UpstreamError(f"The answer service broke off mid-answer ({_describe(piece)}).")
                    if not _transient(piece):
                        raise _fatal(piece)
                    last_error = piece
                    break
            finally:
                # Past the deadline, or the consumer went away: the exchange stops at its next chunk, and its thread
                # ends at the latest when the request's own timeout (the same deadline) trips.
                cancel.set()
            if isinstance(last_error, TimeoutError):
                break
        if isinstance(last_error, (TimeoutError, openai.APITimeoutError)):
            raise UpstreamTimeoutError(
                f"The answer service did not reply within {self.timeout:g}s ({attempts} attempt"
                f"{'s' if attempts != 1 else ''}); retry later."
            )
        if isinstance(last_error, openai.APIStatusError):
            raise UpstreamError(f"The answer service returned HTTP {last_error.status_code}.")
        raise UpstreamError(f"The answer service is unreachable: {_describe(last_error)}")

    def generate(
        self, *, question: str, passages: Sequence[SourcePassage], history: Sequence[HistoryTurn] = ()
    ) -> GeneratedAnswer:
        return answer_collect(self.stream(question=question, passages=passages, history=history))

    def answerable(
        self,
        *,
        question: str,
        passages: Sequence[SourcePassage],
        question_read: bool = True,
        similarity_floor: float | None = None,
    ) -> bool:
        """Always: the model reads the passages and, told to, says in its answer when they hold none (which the turn
        cannot tell before the text is made)."""
        return True

    def rewrite(self, *, question: str, history: Sequence[HistoryTurn]) -> str:
        """The question as one that stands on its own, read in the context of `history`, within `rewrite_timeout`
        (failures as an answer's). What comes back is one line of at most a thousand characters, else the question."""
        messages: list[dict] = [
            {
                "role": "system",
                "content": "Rewrite the user's last question so that it can be understood without the conversation "
                "before it: name what its pronouns and short references stand for. Reply with the rewritten "
                "question only, on one line. If it already stands on its own, repeat it unchanged.",
            }
        ]
        for turn in history:
            messages += [{"role": "user", "content": turn.question}, {"role": "assistant", "content": turn.answer}]
        messages.append({"role": "user", "content": question})
        parts: list[str] = []
        for _ in self._attempts(
            messages=messages, deadline=time.monotonic() + self.rewrite_timeout, parts=parts, usage={}
        ):
            pass
        rewritten = " ".join("".join(parts).split())
        return rewritten if 0 < len(rewritten) <= _REWRITE_MAX_CHARS else question


def _transient(error: BaseException) -> bool:
    if isinstance(error, openai.APIStatusError):
        return error.status_code == 429 or error.status_code >= 500
    # Connection refused or reset, a read timeout, a reply that broke off before any text (httpx2's own errors reach
    # here from the stream's iteration, the SDK's from the request).
    return isinstance(error, (openai.APIConnectionError, httpx2.TransportError))


def _fatal(error: BaseException) -> UpstreamError:
    if isinstance(error, _ReplyTooLarge):
        return UpstreamError(f"The answer service sent a reply larger than {REPLY_MAX_BYTES // (1024 * 1024)} MiB.")
    if isinstance(error, openai.APIStatusError):
        return UpstreamError(
            f"The answer service refused the request (HTTP {error.status_code}).",
            extra={"upstream_status": error.status_code},
        )
    # A reply that is no chat-completion stream (not JSON, not the chunks' shape).
    logger.warning("answer service reply not understood: %r", error)
    return UpstreamError("The answer service sent a reply that is not a chat completion.")


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "no attempt could be made in time"
    cause = error.__cause__ or error.__context__
    return f"{error}" + (f" ({cause})" if cause is not None and str(cause) not in str(error) else "")


def _is_count(value: object) -> bool:
    """Whether the answer service reported a usable token count: a whole number a turn can store (else the turn
    counts its own)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= COUNT_MAX


def answer_generator() -> AnswerGenerator:
    """The configured generator: chat completions when `LLM_BASE_URL` and `LLM_MODEL` are set, else extractive."""
    if settings.LLM_BASE_URL and settings.LLM_MODEL:
        return ChatCompletionsAnswerGenerator(
            base_url=settings.LLM_BASE_URL,
            model=settings.LLM_MODEL,
            api_key=settings.LLM_API_KEY,
            timeout=settings.LLM_TIMEOUT,
            rewrite_timeout=settings.LLM_REWRITE_TIMEOUT,
        )
    return ExtractiveAnswerGenerator()
