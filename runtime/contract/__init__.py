"""The chat contract engine: hand-written logic over the tables generated from spec/.

One module per concern; import from the module::

    from runtime.contract.validator import validate_chat_request
    from runtime.contract.requirements import required_chat_features

``checks`` (value checks with OpenAI-style messages), ``messages``, ``tools``,
``validator`` (the one request validator), ``requirements`` (features, guarantees, limits
and whether a declaration covers them), ``declaration`` (a worker's chat declaration),
``sampling`` and ``dispatch`` (the job payload and the operation fingerprint),
``conversation`` (the flattened prompt and context_fit), ``verification`` (the reply against
the request) and ``pricing`` (the output estimate). The tables and names they read come
from ``generated.chat.tables*`` and ``generated.chat.names``.

``registry`` lists every condition, rule and mode the engine implements by the name the
spec uses; it imports nothing from generated/ (codegen reads it to refuse a spec naming
something the engine lacks), so this package imports no module eagerly.
"""
