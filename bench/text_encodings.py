"""How often a text file saved in a legacy encoding is read as written: `kbplatform.text_encoding.text_decode`, the
reading every upload and curated-answer import goes through, beside charset-normalizer's guess alone and beside the
same decoder without its least-odd step (`least_odd_reading`, patched to return the guess it is given), same run.

Texts: Faker's (the version installed with factory-boy) for each language below, words of its locale's word list
joined into sentences, at two lengths (a title or a question: up to 60 characters; a short note: up to 200), and the
same in capitals for the Cyrillic and Greek ones (a heading typed in capitals must stay read); Chinese and Japanese,
Korean from the shared question sets and Faker. Each text is encoded in the code page named and read back; a text the
code page cannot hold is skipped and counted. A seed picks the texts; the figures of a seed never looked at while the
rules were written are the ones to believe (`--seed`).

Usage: .venv/bin/python bench/text_encodings.py [--texts N] [--seed S] [--show K]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data" / "zh"

from charset_normalizer import from_bytes  # noqa: E402
from faker import Faker  # noqa: E402
from opencc import OpenCC  # noqa: E402

from kbplatform import text_encoding  # noqa: E402

# (Faker locale, code page, in capitals too)
LATIN_AND_OTHERS = [
    ("fr_FR", "cp1252", False),
    ("de_DE", "cp1252", False),
    ("es_ES", "cp1252", False),
    ("it_IT", "cp1252", False),
    ("pt_PT", "cp1252", False),
    ("nl_NL", "cp1252", False),
    ("da_DK", "cp1252", False),
    ("pl_PL", "cp1250", False),
    ("cs_CZ", "cp1250", False),
    ("sk_SK", "cp1250", False),
    ("hu_HU", "cp1250", False),
    ("ro_RO", "cp1250", False),
    ("hr_HR", "cp1250", False),
    ("tr_TR", "cp1254", False),
    ("lt_LT", "cp1257", False),
    ("lv_LV", "cp1257", False),
    ("et_EE", "cp1257", False),
    ("ru_RU", "cp1251", True),
    ("ru_RU", "koi8_r", True),
    ("uk_UA", "cp1251", True),
    ("bg_BG", "cp1251", True),
    ("el_GR", "cp1253", True),
    ("el_GR", "iso8859_7", True),
    ("he_IL", "cp1255", False),
    ("ar_AA", "cp1256", False),
    ("th_TH", "cp874", False),
    ("ja_JP", "shift_jis", False),
    ("ja_JP", "euc_jp", False),
    ("ko_KR", "euc_kr", False),
]
# (set, encoding, written in Traditional characters: a Big5 file is)
CHINESE = [("lcqmc.jsonl", "gbk", False), ("lcqmc.jsonl", "cp950", True), ("afqmc_dev.jsonl", "gbk", False)]
LENGTHS = (60, 200)


def _faker_texts(locale: str, *, count: int, length: int, seed: int) -> list[str]:
    fake = Faker(locale)
    fake.seed_instance(seed)
    return [fake.text(max_nb_chars=length).replace("\n", " ") for _ in range(count)]


def _chinese_texts(name: str, *, count: int, seed: int, traditional: bool) -> list[str]:
    rows = [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    step = max(len(rows) // count, 1)
    texts = [rows[(seed + i * step) % len(rows)]["question1"] for i in range(count)]
    return [OpenCC("s2t").convert(text) for text in texts] if traditional else texts


def _guess_alone(data: bytes) -> str | None:
    best = from_bytes(data).best()
    return None if best is None else str(best)


def _without_least_odd(data: bytes) -> str | None:
    with mock.patch.object(text_encoding, "least_odd_reading", lambda _data, matches: str(matches[0])):
        return _read(data)


def _read(data: bytes) -> str | None:
    try:
        return text_encoding.text_decode(data)
    except text_encoding.UnreadableTextError:
        return None


def _row(label: str, texts: list[str], encoding: str, *, show: int) -> tuple[int, int, int, int]:
    encoded = []
    for text in texts:
        try:
            encoded.append((text, text.encode(encoding)))
        except UnicodeEncodeError:
            continue
    right = [0, 0, 0]
    shown = 0
    for text, data in encoded:
        readings = (_guess_alone(data), _without_least_odd(data), _read(data))
        for column, reading in enumerate(readings):
            right[column] += reading == text
        if readings[2] != text and shown < show:
            print(f"      misread: {text[:50]!r} as {str(readings[2])[:50]!r}")
            shown += 1
    total = len(encoded)
    print(f"  {label:34} {total:>5} {right[0]:>8} {right[1]:>9} {right[2]:>6}   ({len(texts) - total} not encodable)")
    return total, *right


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=300, help="texts per language, code page and length")
    parser.add_argument("--seed", type=int, default=2027)
    parser.add_argument("--show", type=int, default=0, help="misread texts shown per row")
    args = parser.parse_args()
    started = time.perf_counter()
    print(
        f"faker {version('faker')}, charset-normalizer {version('charset-normalizer')}; seed {args.seed}, "
        f"{args.texts} texts a row; read right by: the guess alone, the decoder without the least-odd step, the decoder"
    )
    print(f"  {'texts':34} {'n':>5} {'guess':>8} {'no odd':>9} {'now':>6}")
    totals = {"as written": [0, 0, 0, 0], "in capitals": [0, 0, 0, 0]}
    for length in LENGTHS:
        for locale, encoding, capitals in LATIN_AND_OTHERS:
            texts = _faker_texts(locale, count=args.texts, length=length, seed=args.seed)
            row = _row(f"{locale} {encoding} <= {length}", texts, encoding, show=args.show)
            totals["as written"] = [a + b for a, b in zip(totals["as written"], row, strict=True)]
            if capitals:
                texts = [text.upper() for text in texts]
                row = _row(f"{locale} {encoding} <= {length} CAPITALS", texts, encoding, show=args.show)
                totals["in capitals"] = [a + b for a, b in zip(totals["in capitals"], row, strict=True)]
    for name, encoding, traditional in CHINESE:
        texts = _chinese_texts(name, count=args.texts, seed=args.seed, traditional=traditional)
        row = _row(f"{name} {encoding}", texts, encoding, show=args.show)
        totals["as written"] = [a + b for a, b in zip(totals["as written"], row, strict=True)]
    print()
    for kind, (n, guess, before, now) in totals.items():
        print(
            f"{kind}: {n} texts; read right: guess alone {guess} ({guess / n:.3f}), without the least-odd step "
            f"{before} ({before / n:.3f}), the decoder {now} ({now / n:.3f})"
        )
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
