"""Answers that fit: the message window of Open and Fold, and the max message size.

gRPC will not send a message over the daemon's ``--max-message-bytes``, and the folded state
of a long run can be larger. So Open and Fold send the state with a *message window*: at
most ``message_window`` trailing messages, starting at a clean tool-call boundary (the
alignment History pages use, ``journald.core.paging.tail_start``) and moved later, to the next
clean boundary, while the window would not fit; ``messages_offset`` says where the window
starts and ``messages_total`` how many messages there are, and a client pages the rest
through History. Only the message lists are windowed: the pending turn, the counters and
every other field are always complete.

Window 0 asks for every message (what every Open and Fold did before the window existed).
An answer that would not fit is refused with ``response_too_large``, which says to ask for a
window, instead of failing inside gRPC's send. A Fork's answer is not refused (the fork is
written by then): window 0 gets the largest tail that fits (``fill_fitting``).
"""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence

from google.protobuf.message import Message as ProtoMessage
from journald_proto import journal_pb2 as pb

from journald.core.errors import ResponseTooLarge
from journald.core.fold import Message
from journald.core.paging import align_forward, tail_start
from journald.server.convert import message_to_pb

# Room kept free for what grows once messages are added: the length prefixes of the nested
# messages that hold the list (at most 10 bytes each) and the offset varint.
FRAME_SLACK_BYTES = 64


def _varint_bytes(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def fill_window(
    out: MutableSequence[pb.Message], messages: Sequence[Message], window: int, room: int
) -> int:
    """Append the window of ``messages`` to ``out`` and return the index it starts at: every
    message when ``window`` is 0, else the trailing ``window`` (aligned back) cut to what
    fits in ``room`` bytes (aligned forward)."""
    if window <= 0:
        out.extend(message_to_pb(m) for m in messages)
        return 0
    start = tail_start(messages, window)
    kept: list[pb.Message] = []  # newest first
    used = 0
    for i in range(len(messages) - 1, start - 1, -1):
        m = message_to_pb(messages[i])
        size = m.ByteSize()
        used += 1 + _varint_bytes(size) + size  # field tag, length, bytes
        if used > room:
            start = align_forward(messages, i + 1)
            del kept[len(messages) - start :]
            break
        kept.append(m)
    out.extend(reversed(kept))
    return start


def fill_fitting(
    out: MutableSequence[pb.Message], messages: Sequence[Message], window: int, room: int
) -> int:
    """``fill_window`` for an answer that must not be refused (a Fork's, written before it is
    answered): window 0 asks for every message, and gets the largest clean tail that fits in
    ``room`` bytes when they do not all fit."""
    return fill_window(out, messages, window if window > 0 else len(messages), room)


def room_left(response: ProtoMessage, limit_bytes: int) -> int:
    """Bytes a message list may take in ``response`` (as built so far) under the limit."""
    return max(0, limit_bytes - response.ByteSize() - FRAME_SLACK_BYTES)


def check_fits(response: ProtoMessage, limit_bytes: int, what: str, ask: str, run_id: str) -> None:
    """Refuse an answer gRPC could not send, with a sentence that says what to ask instead."""
    size = response.ByteSize()
    if size > limit_bytes:
        raise ResponseTooLarge(
            f"{what} of run {run_id} is {size} bytes, over the daemon's max message size of "
            f"{limit_bytes} bytes (journald serve --max-message-bytes); {ask}",
            metadata={"run_id": run_id, "bytes": size, "limit_bytes": limit_bytes},
        )


def ask_for_state(window: int) -> str:
    """What to do about a state answer over the limit, given the window asked for."""
    if window <= 0:
        return (
            "ask for a message window (message_window, e.g. 1000, what the journald clients "
            "send by default) and page the earlier messages through History"
        )
    return (
        "its fields other than the messages (the pending turn, anomalies) are over it alone: "
        "start the daemon with a larger --max-message-bytes"
    )


ASK_FOR_SMALLER_PAGE = "ask for fewer messages per page (a smaller limit)"
