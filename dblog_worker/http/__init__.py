"""The worker's HTTP API: status, dump requests and their control, metrics, a live view.

``server.ControlServer`` serves it (the worker starts and stops it); ``api`` holds the
routes, ``openapi`` their OpenAPI 3.1 document. docs/http.md describes it for users.
"""
