"""Storage backends behind one protocol (see ``journald.storage.base``), opened by name
through ``journald.storage.registry``."""
