"""The chat front: OpenAI's /v1/chat/completions and /v1/models over the native chat routes.

One Starlette app on one uvicorn event loop, no database connection: it admits a request
(caps, size, key, the shared validator), submits it to the native API over HTTP with an
operation key, waits on the request's Redis completion signal (with a slow fallback poll),
and answers in OpenAI's shape, or as server-sent events for ``stream: true``.

Modules: ``config`` (FrontConfig), ``admission`` (caps, body, key, validation),
``native_client`` (submit with lost-response recovery, status, cancel, models),
``signals`` (one shared pub/sub connection), ``waiter`` (the wait's state machine),
``responses`` (completion and usage), ``sse`` (the stream's chunks), ``stream_events``
(which source a stream reads, keep-alive notes), ``progress_stream`` (delta relay from the
request's Redis stream, pacing, reconciliation), ``errors`` (the OpenAI envelope), ``app``
(routes), ``server`` (uvicorn in a thread).
"""
