"""The wire: QStash's HTTP API as functions from request to response (``api.py`` routes a
request, one module per resource answers it), and the ``Upstash-*`` headers to and from options.
"""
