"""``journald view``: a full-screen, live viewer of the daemon's runs (Textual).

``command`` registers the CLI command without importing Textual; ``app`` is the app,
``data`` its only door to the daemon (the Python client), ``model`` the pure transcript
model, ``transcript`` the line-based widget, and one module per screen.
"""
