"""The chat front: OpenAI's /v1/chat/completions and /v1/models over the native chat routes.

One Starlette app on one uvicorn event loop, no database connection: it admits a request
(``admission``), submits it to the native API with an operation key (``native_client``),
waits on the request's Redis completion signal with a slow fallback poll (``signals``,
``waiter``), and answers in OpenAI's shape, or as server-sent events for ``stream: true``
(``sse``, ``stream_events``, ``progress_stream``). ``app`` holds the routes, ``server`` runs
uvicorn.
"""
