"""The chat contract engine: hand-written logic over the tables generated from spec/.

One module per concern, imported by name (``from runtime.contract.validator import
validate_chat_request``): ``validator``, ``requirements``, ``declaration``, ``dispatch``,
``conversation``, ``verification``, ``pricing`` and their helpers; the tables and names
they read come from ``generated.chat``. ``registry`` lists every name the engine implements
and imports nothing from generated/ (codegen reads it to refuse a spec naming something the
engine lacks), so this package imports no module eagerly.
"""
