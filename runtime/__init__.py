"""Hand-written services: the native API, the chat front, the chat worker, and the stores.

Contract literals (parameter names, OpenAI defaults, features, limits, error codes)
are imported from ``generated``; none is spelled here.
"""
