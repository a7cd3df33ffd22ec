"""``journald_proto.journal_pb2_grpc`` under its old name (see the package docstring)."""

import sys

from journald_proto import journal_pb2_grpc

sys.modules[__name__] = journal_pb2_grpc
