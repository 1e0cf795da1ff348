"""horde-client (PyPI 1.0.3, its own venv) as a requester: text_gen and list_models.

Run as ``python horde_client_driver.py API_URL REQUESTER_KEY MODEL``; a worker must serve
the request meanwhile (the test does). horde-client parses every answer with its pydantic
models (``Job.kudos: int``, ``JobGenerationOutput.seed: int``, ``Model.count: int``): an
answer they refuse raises. Its status poll waits ``config.REQUEST_RETRY_TIMEOUT`` (12 s)
between reads; the driver sets that setting to 0.5 s so the test does not sleep. Prints
one JSON object.
"""

from __future__ import annotations

import json
import sys

from horde_client import HordeClient, config, model

config.REQUEST_RETRY_TIMEOUT = 0.5


def main() -> None:
    api_url, requester_key, model_name = sys.argv[1:4]
    client = HordeClient(base_url=api_url, api_token=requester_key)
    models = client.list_models(model.ModelType.text)
    images = client.list_models(model.ModelType.image)
    client.set_model(model_name)
    result = client.text_gen("Tell me a story.", model.TextGenParams(max_length=80))
    print(
        json.dumps(
            {
                "models": [m.name for m in models],
                "image_models": [m.name for m in images],
                "done": result.done,
                "kudos": result.kudos,
                "texts": [g.text for g in result.generations if g],
                "seeds": [g.seed for g in result.generations if g],
            }
        )
    )


if __name__ == "__main__":
    main()
