"""The generated stubs, re-exported for users who import them from the client.

They live in the ``journald_proto`` distribution (proto/python), which the daemon and this
client both depend on. ``journald_client.pb.journal_pb2`` *is* ``journald_proto.journal_pb2``
(the same module object, so its messages are the same classes and the descriptors are
registered once).
"""

from journald_proto import journal_pb2, journal_pb2_grpc

__all__ = ["journal_pb2", "journal_pb2_grpc"]
