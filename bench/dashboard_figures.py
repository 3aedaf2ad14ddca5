"""Cost of the dedup dashboard's figures (conversations.dashboard.dashboard_compute) as the period's event count
grows, against a baseline measured in the same process: one bare pass over the same events summing one field
(the least work any figure can do). The ratio says how many such passes the whole dashboard costs.

The figures are plain Python over `EventFacts`, one pass per figure family; this shows up to what volume that
stays interactive before the period needs aggregating in the database instead.

Usage: .venv/bin/python bench/dashboard_figures.py [--sizes 10000,100000,1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")

import django  # noqa: E402

django.setup()

from conversations.dashboard import EventFacts, dashboard_compute  # noqa: E402

ACTIONS = ("answered", "served_cached", "bypassed", "smalltalk")
VERDICTS = ("unreviewed", "unreviewed", "unreviewed", "correct", "incorrect")


def synthetic_events(count: int, *, days: int, seed: int = 1) -> list[EventFacts]:
    rng = random.Random(seed)
    start = date(2026, 1, 1)
    return [
        EventFacts(
            day=start + timedelta(days=rng.randrange(days)),
            action=rng.choice(ACTIONS),
            similarity=rng.random() if rng.random() > 0.1 else None,
            shadow=rng.random() < 0.05,
            relaxed=rng.random() < 0.08,
            excluded_count=rng.randrange(5),
            tokens_saved=rng.randrange(1000),
            ms_saved=rng.random() * 3000,
            review_verdict=rng.choice(VERDICTS),
        )
        for _ in range(count)
    ]


def best_of(repeat: int, work) -> float:  # noqa: ANN001
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        timings.append(time.perf_counter() - started)
    return min(timings)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    print(f"dashboard_compute over a {args.days}-day period, best of {args.repeat}")
    print(f"{'events':>10} {'baseline ms':>12} {'dashboard ms':>13} {'ratio':>7} {'us/event':>9}")
    for size in (int(s) for s in args.sizes.split(",")):
        events = synthetic_events(size, days=args.days)
        start, end = date(2026, 1, 1), date(2026, 1, 1) + timedelta(days=args.days - 1)
        baseline = best_of(args.repeat, lambda events=events: sum(e.tokens_saved for e in events))
        dashboard = best_of(
            args.repeat,
            lambda events=events, start=start, end=end: dashboard_compute(events, start=start, end=end, threshold=0.9),
        )
        print(
            f"{size:>10} {baseline * 1000:>12.1f} {dashboard * 1000:>13.1f} {dashboard / baseline:>7.1f}"
            f" {dashboard / size * 1e6:>9.2f}"
        )


if __name__ == "__main__":
    main()
