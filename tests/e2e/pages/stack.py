"""What the pages' browser tests share besides the browser (tests/support/chromium.py) and
the worker they start (``serving``, tests/support/workers.py): ``WAIT`` is how long a test
waits for what it waits for (a reply, a worker's first pop).
"""

from __future__ import annotations

WAIT = 30.0
