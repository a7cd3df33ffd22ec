"""The pure core: records, the fold, fingerprints, governance, admission, paging, the error
tree and the schema predicate. Nothing here does I/O (``tests/unit/core/test_pure_core.py`` keeps
it so); storage, the server and the clients are built around it."""
