"""What a client looping on the front meets over a minute, on a running horde (``horde-chat
up``, the shipped limits): the official openai SDK at its defaults (two retries, honouring
``retry-after-ms``; ``--max-retries`` changes that) sends one chat completion after
another, each as soon as the last one ended, for ``--seconds``. Printed, never pass/fail.
Not one of ``make bench``'s benches, which start what they measure: this one needs a horde
already serving.

Per ``--bucket`` seconds: the replies and the errors (status and code) that ended in it.
Figures: ``looping_replies_per_second_first_30s``, ``looping_replies_first_60s``,
``looping_first_error_s`` (when the client first met an error, after the SDK's retries),
``looping_longest_call_s``.

    .venv/bin/python tools/looping_client.py --base-url http://127.0.0.1:7002/v1

The native API's submit limits (spec/rate_limits.yaml: 2 a second and 90 a minute per
client, 2 a second per key) apply to the client's address, which the front forwards; the
front holds a submit they refuse for up to ``submit_patience`` (10 s), then answers 429.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import openai

from generated.wire import ANONYMOUS_API_KEY


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:7002/v1")
    parser.add_argument("--api-key", default=ANONYMOUS_API_KEY)
    parser.add_argument("--model", default="horde-chat-demo")
    parser.add_argument("--seconds", type=float, default=75.0)
    parser.add_argument("--bucket", type=float, default=5.0)
    parser.add_argument("--max-retries", type=int, default=2, help="the SDK's (default 2)")
    args = parser.parse_args()
    client = openai.OpenAI(
        base_url=args.base_url, api_key=args.api_key, timeout=120, max_retries=args.max_retries
    )
    calls: list[tuple[float, float, str]] = []  # (started, ended, "ok" or status/code)
    start = time.monotonic()
    while time.monotonic() - start < args.seconds:
        began = time.monotonic() - start
        try:
            client.chat.completions.create(
                model=args.model, messages=[{"role": "user", "content": "Who are you?"}]
            )
            outcome = "ok"
        except openai.APIStatusError as error:
            code = error.body.get("code") if isinstance(error.body, dict) else None
            outcome = f"{error.status_code} {code}"
        calls.append((began, time.monotonic() - start, outcome))
    report(calls, args.bucket)


def report(calls: list[tuple[float, float, str]], bucket: float) -> None:
    buckets: dict[int, Counter[str]] = {}
    for _, ended, outcome in calls:
        buckets.setdefault(int(ended // bucket), Counter())[outcome] += 1
    for index in sorted(buckets):
        shown = ", ".join(f"{n} {what}" for what, n in sorted(buckets[index].items()))
        print(f"{index * bucket:5.0f}-{(index + 1) * bucket:3.0f} s: {shown}")
    replies = [ended for _, ended, outcome in calls if outcome == "ok"]
    errors = [ended for _, ended, outcome in calls if outcome != "ok"]
    print(f"figure: looping_replies_per_second_first_30s = {sum(e < 30 for e in replies) / 30:.2f}")
    print(f"figure: looping_replies_first_60s = {sum(e < 60 for e in replies)} replies")
    print(f"figure: looping_first_error_s = {min(errors) if errors else float('nan'):.1f} s")
    longest = max((ended - began for began, ended, _ in calls), default=0.0)
    print(f"figure: looping_longest_call_s = {longest:.1f} s")


if __name__ == "__main__":
    main()
