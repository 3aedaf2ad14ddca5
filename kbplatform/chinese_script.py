"""Chinese in one script: Traditional characters (Taiwan, Hong Kong, and single characters in mainland users' writing)
as their Simplified spelling. Pure, no I/O but OpenCC's tables, loaded once per process on first use.

On the ground floor because both apps read Chinese in one script: the question rules
(`conversations.dedup.chinese_text`), whose word lists and segmenter's dictionary are Simplified, the BM25 side of a
search (`retrieval.vectorstore`), whose jieba analyser matches characters as written, and the multilingual embedding
model (`retrieval.embeddings.model_input`), which reads one question in the two scripts as two texts.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jieba import Tokenizer
    from opencc import OpenCC

# Chinese characters (the unified ideographs, extension A, compatibility ideographs) and 〇, the numeral zero: a text
# without one has nothing to convert and passes through as it is.
_HAN = re.compile(r"[\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# Hiragana, katakana and their extensions, halfwidth katakana: a text holding one is Japanese. Not the katakana middle
# dot (U+30FB), which Chinese text also sets between the parts of a foreign name.
_KANA = re.compile(r"[\u3040-\u30fa\u30fc-\u30ff\u31f0-\u31ff\uff66-\uff9f]")


def is_han(char: str) -> bool:
    """Whether `char` is a Chinese character (or 〇)."""
    return _HAN.match(char) is not None


@cache
def _simplifier() -> OpenCC:
    """OpenCC's Traditional-to-Simplified conversion (`t2s`: characters and the phrases whose conversion needs their
    neighbours), loaded once."""
    from opencc import OpenCC

    return OpenCC("t2s")


def simplified(text: str) -> str:
    """`text` with its Traditional Chinese characters as Simplified ones ("3分鐘沒有到帳" is "3分钟没有到帐").
    Simplified text, and anything not Chinese, passes through unchanged."""
    return _simplifier().convert(text) if _HAN.search(text) else text


def simplified_unless_japanese(text: str) -> str:
    """`simplified(text)`, except for a text holding kana, which passes through unchanged: it is Japanese, and its
    kanji are Japanese spellings ("電話番号", "説明") that the Chinese conversion would rewrite into words of another
    language."""
    return text if _KANA.search(text) else simplified(text)


_HAN_RUN = re.compile(f"{_HAN.pattern}{{2,}}")


def dictionary_pair_share(text: str, *, limit: int = 2000) -> float | None:
    """The share of the pairs of neighbouring Chinese characters in `text` (in its first `limit` such pairs, read in
    Simplified characters) that begin or are a word of jieba's dictionary, or None for a text with no such pair. Real
    Chinese text has about half of its pairs there; characters that stand side by side only by accident, such as the
    bytes of another encoding read as Chinese ones, almost none (docs/ingestion.md, "Encodings: short Chinese files").
    Loads jieba's dictionary, which the question rules share, on first use."""
    pairs = found = 0
    words = segmenter().FREQ
    for run in _HAN_RUN.findall(simplified(text)):
        for start in range(len(run) - 1):
            pairs += 1
            found += run[start : start + 2] in words
            if pairs == limit:
                return found / pairs
    return found / pairs if pairs else None


@cache
def segmenter() -> Tokenizer:
    """jieba's default tokenizer, its dictionary loaded once per process (about 0.7 s and 60 MB; its cache file is
    jieba's own, jieba.cache in the temporary directory, which Milvus Lite's jieba tokenizer shares), its loading
    messages not printed. The question rules cut Chinese into words with it, and `dictionary_pair_share` reads its
    dictionary: one copy for both."""
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.dt.initialize()
    return jieba.dt
