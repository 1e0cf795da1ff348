"""Hand-written code: the native API, the chat front, the chat worker, the stores and the
chat contract engine.

``native`` (upstream's ``/api/v2``, the only service that touches Postgres), ``front`` (the
OpenAI-compatible ``/v1``), ``worker`` (runs jobs on an OpenAI-compatible backend),
``contract`` (validation, verification and pricing shared by the three), ``stores`` and
``launcher`` (``horde-chat up``). Contract literals come from ``generated``, never spelled
here; docs/architecture.md draws the map.
"""
