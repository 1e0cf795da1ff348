"""The types of generated/'s table rows, and the logic that reads them.

generated/ holds only data: each row is an instance of a type here (a ``Route``, a
``RateLimit``, a ``Variable``...), so mypy checks every row against its type. What is done
with a row (a route's Flask rule, a signal's JSON, which requests stream deltas, a setting
read from the environment) is written here once, linted and type-checked, never in a
template. The row types import nothing from generated/, which imports them;
``route_schemas`` loads the named schemas generated/ writes as JSON.
"""
