/**
 * How a pipelined writer packs the appends queued for its stream into messages
 * (docs/protocol.md#coalesced-stream-messages). Not part of the package's API.
 */
import { AppendRequest, AppendStreamRequest } from "./gen/journald/v1/journal";

/**
 * Most bytes of appends put into one stream message (a quarter of the daemon's default
 * 16 MiB message limit); an append above it alone still goes alone.
 */
export const COALESCED_MESSAGE_BYTES = 4 * 1024 * 1024;

/**
 * The stream messages carrying `appends`, in order: one append each for a daemon whose
 * lease does not take batches, else as many as fit `COALESCED_MESSAGE_BYTES` per message
 * (docs/protocol.md#coalesced-stream-messages).
 */
export function streamMessages(appends: AppendRequest[], batches: boolean): AppendStreamRequest[] {
  const out: AppendStreamRequest[] = [];
  let group: AppendRequest[] = [];
  let size = 0;
  const flush = () => {
    if (group.length === 1) out.push({ append: group[0], appends: [] });
    else if (group.length > 1) out.push({ append: undefined, appends: group });
    group = [];
    size = 0;
  };
  for (const a of appends) {
    const n = AppendRequest.encode(a).finish().length;
    if (!batches || (group.length > 0 && size + n > COALESCED_MESSAGE_BYTES)) flush();
    group.push(a);
    size += n;
  }
  flush();
  return out;
}
