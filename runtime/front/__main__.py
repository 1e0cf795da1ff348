"""``python -m runtime.front``: serve the chat front alone, configured by the environment.

HORDE_REDIS_URL is required (the front starts no stores); HORDE_FRONT_HOST / HORDE_FRONT_PORT
say where to listen and the HORDE_FRONT_* variables of ``runtime.front.config`` tune it.
Prints one line ``chat front: <url>/v1`` once it serves, then runs until SIGINT or SIGTERM.
"""

from __future__ import annotations

import os
import sys
import threading

from runtime.config import Settings
from runtime.front.config import FrontConfig
from runtime.front.server import FrontService
from runtime.service_process import serve_until
from runtime.stop_signals import stop_on_signals


def main() -> int:
    settings = Settings.from_env()
    if not settings.redis_url:
        print("HORDE_REDIS_URL is required", file=sys.stderr)
        return 2
    config = FrontConfig.from_env(settings.redis_url, dict(os.environ))
    with stop_on_signals(threading.Event()) as stop:
        service = FrontService.start(config, host=settings.front_host, port=settings.front_port)
        return serve_until(stop, service, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
