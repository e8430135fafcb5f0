"""``hami ui``: the web view of the cluster's accelerators (issue 30 item 3).

- ``page``: what the page shows, as JSON, from ``hami top``'s view model and ``hami
  explain``'s reasons, and the cut one viewer may see.
- ``reading``: the cluster read once per refresh (API server or file) for every viewer.
- ``access``: bearer tokens (TokenReview) and namespaces (SubjectAccessReview).
- ``app``: the WSGI application (GET and HEAD only) and the assets under ``static/``.
- ``main``: the server (``servers/keepalive.py``, or ``servers/https.py`` with TLS).
"""
