"""Hand-written code: the native API, the chat front, the chat worker, the stores, and the
chat contract engine.

``native`` (the upstream-shaped ``/api/v2``, the only service that touches Postgres),
``front`` (the OpenAI-compatible ``/v1``), ``worker`` (pops jobs over the native API and runs
them on an OpenAI-compatible backend), ``contract`` (validation, requirements, verification
and pricing of chat requests, shared by the three), ``stores`` (Postgres, Redis, object
storage, and their embedded servers), ``launcher`` (``horde-chat up``). Contract literals
(parameter names, OpenAI defaults, features, limits, error codes, routes) and the tables the
engine reads are imported from ``generated``; none is spelled here. docs/architecture.md
draws the map.
"""
