"""LangGraph checkpointers on journald (``pip install 'journald-client[langgraph]'``).

``JournaldSaver`` (sync) and ``AsyncJournaldSaver`` (asyncio) implement LangGraph's
``BaseCheckpointSaver`` with the extended operations (``delete_for_runs``, ``copy_thread``,
``prune``). A thread is a journald run; its writer holds the run's lease, so two processes
can never drive one thread at once; checkpoints, channel values and pending writes are
framework state records; a ``messages`` channel is mirrored into the run's conversation.
"""

from journald_client.langgraph.aio import AsyncJournaldSaver
from journald_client.langgraph.saver import JournaldSaver

__all__ = ["AsyncJournaldSaver", "JournaldSaver"]
