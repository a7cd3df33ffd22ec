# the stub of the module this name aliases (see __init__.py)
from journald_proto.journal_pb2 import *  # noqa: F403
