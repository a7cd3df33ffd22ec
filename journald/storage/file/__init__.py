"""The file backend: runs as framed JSON-lines files in a data directory, the default store.

Its on-disk format (layout, line framing, format identity, fsync order, segments and
manifest, recovery, prune, disk faults) is written once, in docs/design.md#file-backend.

Modules: ``store`` (the ``FileStore``: layout, locks, settling, opening), ``journal`` (the
append handle: group commit, durable writes, sealing), ``reads`` (snapshots and the checked
walk of the chain, tail reads, info, listing, verify), ``maintenance`` (prune, recovery, tail
repair), ``segments`` (manifest, line format, the strict chain reader), ``stream`` (sealed
segments read a chunk at a time), ``scrub`` (the background scrub's child process),
``errors`` (OS errors into typed errors, once), ``checkpoint_store`` (checkpoint and
attachment files). Every disk write goes through the seam ``journald.storage.seam``.
"""
