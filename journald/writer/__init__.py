"""The run writer (docs/design.md#the-run-writer): one ``RunWriter`` per held run owns the
acquire (in one order for a client's ``Open`` and the daemon's own lease), the append path
(build, gate, admit, fold, queue, durable, publish) and the close (fold marks, snapshot).

- ``run_writer.py``: ``acquire`` and ``RunWriter``;
- ``gate.py``: the one gate every record the daemon writes passes;
- ``folding.py``: the one fold of a stored run (from its snapshot on);
- ``marks.py``: a run's index (fold marks, snapshot), taken by its writer.

It imports the pure core and the storage protocols, never ``journald.server``, which holds
the registry of writers (the lease table) and the watch hub.
"""
