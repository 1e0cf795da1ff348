"""The services' own pages: the front's playground and the native API's dashboard.

Hand-written HTML, CSS and JavaScript in ``static/``, served by the services themselves with
no CDN and no framework (``site.Page``); each page reads its routes and the contract's names
from a JSON block the service fills in, so the scripts spell no route of their own.
"""
