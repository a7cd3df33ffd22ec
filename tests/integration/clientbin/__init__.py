"""Small client programs run as real subprocesses by the client integration tests."""
