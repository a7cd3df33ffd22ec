"""Storage backends behind one protocol (see ``journald.storage.base``)."""
