"""What both services share for operators: Prometheus metrics and the access log.

``metrics``: the HTTP request counter and latency histogram every service exposes on
``/metrics`` (one registry per service kind, so a process running both shows each its own),
and the exposition. ``access_log``: one line per request (method, route, status, latency,
request id, user id; never a key or a body), plain or JSON lines (``HORDE_LOG_FORMAT``).
``context``: the request id and user id of the request being served (context variables, so
a store lookup deep in a service can name the user without passing it up).

This package imports neither service: the native API and the front import it.
"""
