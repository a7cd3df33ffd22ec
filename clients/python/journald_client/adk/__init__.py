"""Google ADK on journald (``pip install 'journald-client[adk]'``).

    from google.adk.runners import Runner
    from journald_client.adk import JournaldSessionService

    runner = Runner(agent=agent, app_name="shop", session_service=JournaldSessionService())

See ``journald_client.adk.service`` for what a session is in journald, and
``journald_client.adk.records`` for how its events are kept.
"""

from journald_client.adk.service import JournaldSessionService

__all__ = ["JournaldSessionService"]
