"""What the prompt screen costs a submission (printed, never pass/fail).

Every text and chat submission is screened (runtime/native/requests/moderation.py) on its
whole prompt, up to the body cap, under its user's row lock. The default rules
(spec/moderation.yaml) run on the lowercased text, and only when it holds one of their
needles; the operator's patterns on the text as sent. Figures, each the median of REPEATS
runs of ``Screen.check`` on English-like text that passes: ``screen_4k_ms`` (a 4 KiB
prompt, no needle), ``screen_1m_ms`` (1 MiB, no needle), ``screen_1m_needle_ms`` (1 MiB
holding a needle, so the rules search it all), ``screen_1m_patterns_only_ms`` (1 MiB with
the defaults off: the operator's one pattern alone).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from generated.moderation import PASSING_EXAMPLES
from runtime.native.requests.moderation import Screen

REPEATS = 7
PATTERN = r"\bforbidden-word\b"
PLAIN = "The kids walked to the harbour and watched the boats come in before supper. "


def _median_ms(screen: Screen, text: str) -> float:
    times = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        screen.check(text)
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def main() -> None:
    mib = (PLAIN * (2**20 // len(PLAIN) + 1))[: 2**20]
    with_needle = mib[: -len(PASSING_EXAMPLES[0]) - 1] + " " + PASSING_EXAMPLES[0]
    screen = Screen((PATTERN,))
    figures = {
        "screen_4k_ms": _median_ms(screen, mib[:4096]),
        "screen_1m_ms": _median_ms(screen, mib),
        "screen_1m_needle_ms": _median_ms(screen, with_needle),
        "screen_1m_patterns_only_ms": _median_ms(Screen((PATTERN,), defaults=False), mib),
    }
    for name, value in figures.items():
        print(f"figure: {name} = {value:.3f} ms")


if __name__ == "__main__":
    main()
