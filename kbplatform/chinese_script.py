"""Chinese in one script: Traditional characters (Taiwan, Hong Kong, and single characters in mainland users' writing)
as their Simplified spelling. Pure, no I/O but OpenCC's tables, loaded once per process on first use.

On the ground floor because two apps read Chinese in one script: the question rules
(`conversations.dedup.chinese_text`), whose word lists and segmenter's dictionary are Simplified, and the BM25 side of a
search (`retrieval.vectorstore`), whose jieba analyser matches characters as written.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opencc import OpenCC

# Chinese characters (the unified ideographs, extension A, compatibility ideographs) and 〇, the numeral zero: a text
# without one has nothing to convert and passes through as it is.
_HAN = re.compile(r"[\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


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
