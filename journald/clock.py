"""UTC timestamps in the record format (RFC 3339, microseconds, ``Z``).

One clock for the daemon and the Python client: the daemon stamps records with the client
package's function, so a record stamped on either side reads the same.
"""

from __future__ import annotations

from journald_client.codec import now_ts as utc_ts

__all__ = ["utc_ts"]
