"""OpenAI's Responses API on the front (POST /v1/responses), stateless, over the chat route.

A translation layer in and out of the chat request life (runtime.front.chat): ``request``
and ``items`` turn the body into the chat request a chat completion makes (spec/responses/),
``reply`` builds the Response object from the chat reply, ``events`` its stream, and
``route`` is the route's dialect.
"""
