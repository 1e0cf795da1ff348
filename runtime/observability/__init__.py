"""What both services share for operators: Prometheus metrics and the access log.

``metrics``: the HTTP counters and latency histogram on ``/metrics``; ``access_log``: one
line per request, plain or JSON (``HORDE_LOG_FORMAT``), never a key or a body; ``context``:
the request id and user id being served, as context variables. This package imports neither
service: the native API and the front import it.
"""
