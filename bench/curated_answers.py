"""Hit latency of a curated answer against today's stored-answer hit, both through the REST API, in one run.

Two knowledge bases of one tenant hold the same handbook (indexed by the worker through the API); the second also holds
200 curated Q&A pairs imported from an XLSX file through the API. Each sample takes two conversations, side by side:
both first ask a handbook question that is answered fresh (a miss); then
- stored: the first conversation, on the knowledge base without curated answers, asks that question in other words and
  is served its own stored answer: the hit as it was before curated answers (no curated set to compare with);
- curated: the second, on the knowledge base with the 200 pairs, asks a paraphrase of a curated question and is served
  the curated answer (its 200 x ~2 phrasings compared first, then served with no history match).
Only the second turns are timed (POST /api/v1/conversations/{id}/messages/, JSON); a timed turn that was not served is
counted and left out. Prints p50/p95 of each, the difference of the p50s and the paired median difference (which a
change of load during the run moves less), with the load average. Target: curated within 10 ms of stored.

Usage: .venv/bin/python bench/curated_answers.py [--samples 60]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    conversation_start,
    documents_through_api,
    knowledge_base_through_api,
    load_average,
    platform,
    server_like_client,
    tenant_api_client,
    worker,
)

# A handbook question and the same question in other words: the stored-answer hit of the first conversation.
HANDBOOK_PAIRS = [
    ("How do I reset my password?", "How can I reset my password?"),
    ("How much does the Team plan cost?", "What is the price of the Team plan?"),
    ("Who can delete a workspace?", "Who is allowed to delete a workspace?"),
    ("How do I create an API key?", "How can I create an API key?"),
    ("Which protocols does single sign-on support?", "What protocols are supported by single sign-on?"),
    ("How do I export a report?", "How can I export a report?"),
]
# Curated answers and a paraphrase of each: the curated hit of the second conversation.
CURATED = [
    (
        "Employees get 25 vacation days a year after 5 years of service.",
        ["How many vacation days do I get after 5 years?", "What is the holiday allowance after five years?"],
        "How many days of vacation will I have after 5 years?",
    ),
    (
        "Parking is free in the staff car park; ask reception for a badge.",
        ["Where can I park at the office?", "Is there parking for staff?"],
        "Where do I park at the office?",
    ),
    (
        "Expenses are reimbursed within 10 working days of approval.",
        ["How long does expense reimbursement take?", "When are expenses paid back?"],
        "How long does an expense reimbursement take?",
    ),
]
HANDBOOK = {
    "password": "To reset your password, open Settings, choose Security and click Reset password.",
    "pricing": "The Team plan costs 12 dollars per user per month, billed yearly.",
    "admins": "Administrators can invite users and change roles. Only administrators may delete a workspace.",
    "api-keys": "API keys are created under Settings, Developer. Each key can be revoked at any time.",
    "sso": "Single sign-on supports SAML 2.0 and OpenID Connect.",
    "export": "Reports can be exported as PDF or CSV from the Reports page.",
}


def curated_workbook(total: int) -> bytes:
    import openpyxl

    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.append(["answer", "question", "question_2"])
    for answer, phrasings, _ in CURATED:
        sheet.append([answer, *phrasings])
    for number in range(total - len(CURATED)):
        branch = number + 100
        sheet.append(
            [
                f"Branch {branch} opens at 9 and closes at 17.",
                f"When does branch {branch} open?",
                f"What are the opening hours of branch {branch}?",
            ]
        )
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--pairs", type=int, default=200)
    args = parser.parse_args()
    os.environ["KB_RATE_LIMIT"] = ""  # a bench's hundreds of turns a minute are not a client to hold back
    with platform(name="curated") as env, worker(env):
        tenant, admin_client = tenant_api_client(slug="bench-curated", name="Curated answers bench")
        documents = [{"title": key, "external_id": key, "text": text} for key, text in HANDBOOK.items()]
        plain = knowledge_base_through_api(tenant=tenant, client=admin_client, name=f"plain-{time.time_ns()}")
        curated = knowledge_base_through_api(tenant=tenant, client=admin_client, name=f"curated-{time.time_ns()}")
        for knowledge_base in (plain, curated):
            documents_through_api(
                tenant=tenant, client=admin_client, knowledge_base=knowledge_base, documents=documents
            )
        upload = io.BytesIO(curated_workbook(args.pairs))
        upload.name = "curated.xlsx"
        started = time.perf_counter()
        imported = admin_client.post(
            f"/api/v1/knowledge-bases/{curated.pk}/curated-answers/import/", {"file": upload}, format="multipart"
        ).json()
        import_seconds = time.perf_counter() - started
        if imported.get("created") != args.pairs:
            raise SystemExit(f"import refused: {str(imported)[:500]}")
        client = server_like_client()
        client.credentials(**admin_client._credentials)

        def turn(conversation: int, question: str) -> tuple[float, dict]:
            began = time.perf_counter()
            response = client.post(
                f"/api/v1/conversations/{conversation}/messages/", {"question": question}, format="json"
            )
            elapsed = (time.perf_counter() - began) * 1000
            if response.status_code != 200:
                raise SystemExit(f"turn refused ({response.status_code}): {response.content[:300]!r}")
            return elapsed, response.json()

        def start(knowledge_base: object) -> int:
            return conversation_start(client, knowledge_base.pk)

        stored, curated_ms, paired, not_served = [], [], [], {"stored": 0, "curated": 0}
        for sample in range(args.samples + 3):  # the first 3 warm the processes' caches and are not counted
            first, again = HANDBOOK_PAIRS[sample % len(HANDBOOK_PAIRS)]
            paraphrase = CURATED[sample % len(CURATED)][2]
            one, two = start(plain), start(curated)
            turn(one, first)
            turn(two, first)
            # The order of the two timed turns alternates, so neither always runs on a warmer process.
            timed = [("stored", one, again), ("curated", two, paraphrase)]
            results = {}
            for kind, conversation, question in timed if sample % 2 else timed[::-1]:
                elapsed, body = turn(conversation, question)
                wanted = body["dedup"]["action"] == "served_cached" and (
                    (body["dedup"]["curated_answer_id"] is not None) == (kind == "curated")
                )
                results[kind] = elapsed if wanted else None
            if sample < 3:
                continue
            for kind, elapsed in results.items():
                if elapsed is None:
                    not_served[kind] += 1
            if results["stored"] is not None:
                stored.append(results["stored"])
            if results["curated"] is not None:
                curated_ms.append(results["curated"])
            if results["stored"] is not None and results["curated"] is not None:
                paired.append(results["curated"] - results["stored"])
        print(
            f"curated answers bench: {args.pairs} pairs imported from XLSX in {import_seconds:.2f} s; {load_average()}"
        )
        print(f"{'case':<10}{'n':>5}{'p50 ms':>10}{'p95 ms':>10}")
        for label, values in (("stored", stored), ("curated", curated_ms)):
            print(f"{label:<10}{len(values):>5}{statistics.median(values):>10.2f}{percentile(values, 0.95):>10.2f}")
        difference = statistics.median(curated_ms) - statistics.median(stored)
        print(
            f"curated - stored: p50 difference {difference:+.2f} ms, paired median {statistics.median(paired):+.2f} ms "
            f"(target: within 10 ms); not served: {not_served}; {load_average()}"
        )


if __name__ == "__main__":
    main()
