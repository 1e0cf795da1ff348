"""One instructor call against the front, run by tests/e2e/test_real_clients.py in instructor's
own virtual environment (``.venv/clients/instructor``, made by ``make install``): instructor
caps jiter below what the openai release of the test environment needs, so it cannot be
installed beside it. Imports nothing of the project.

    python instructor_client.py BASE_URL API_KEY MODEL MODE

MODE is an ``instructor.Mode`` name (TOOLS, JSON_SCHEMA). Prints one JSON line: the parsed
object, instructor's and openai's versions, and the raw completion's finish reason and usage.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

import instructor
from openai import OpenAI
from pydantic import BaseModel


class Person(BaseModel):
    name: str
    age: int


def main(base_url: str, api_key: str, model: str, mode: str) -> None:
    client = instructor.from_openai(
        OpenAI(base_url=base_url, api_key=api_key), mode=instructor.Mode[mode]
    )
    person, completion = client.chat.completions.create_with_completion(
        model=model,
        response_model=Person,
        messages=[{"role": "user", "content": "Extract: Ada is 36."}],
        max_retries=0,  # what the first reply gives, not a retry's
    )
    assert isinstance(person, Person)
    print(
        json.dumps(
            {
                "person": person.model_dump(),
                "instructor": version("instructor"),
                "openai": version("openai"),
                "finish_reason": completion.choices[0].finish_reason,
                "usage": completion.usage.model_dump() if completion.usage else None,
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:5])
