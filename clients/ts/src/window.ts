/**
 * Message windows: the daemon answers an Open or a Fold with at most `messageWindow` of the
 * newest messages, so the answer stays under its max message size however long the run is
 * (`RunState.messagesOffset` says how many came before). start, resume and fold page the
 * earlier messages through History before they return, so `run.state.messages` and
 * `fold().state.messages` (and `governedMessages`) hold every message, as before.
 */
import type { CallOpts, Client } from "./client";
import { JournaldError, ResponseTooLargeError } from "./errors";
import { FoldResponse, HistoryResponse, HistoryView, Message, RunState } from "./gen/journald/v1/journal";

/** How many of the newest messages an Open or Fold asks for (0 = all in one answer). */
export const DEFAULT_MESSAGE_WINDOW = 1000;

/**
 * About how many bytes of messages one History call brings when fetching the messages before
 * a window: the page's message count follows the sizes seen so far (the window's, then each
 * page's); a page over the daemon's max message size is asked again at half the count.
 */
export const PAGE_BYTES = 4 * 1024 * 1024;

/** Messages in the first History call when no window sizes it. */
export const FIRST_PAGE = 1000;

/** How many messages like `msgs` make about PAGE_BYTES (0: no messages to tell). */
function perPage(msgs: Message[]): number {
  if (!msgs.length) return 0;
  const size = msgs.reduce((n, m) => n + m.contentJson.length + m.role.length + 8, 0); // 8: framing
  return Math.max(1, Math.floor((PAGE_BYTES * msgs.length) / Math.max(1, size)));
}

/**
 * Raised by the client itself (never by the daemon): a compaction or restore replaced the
 * conversation between reading a window and paging the messages before it. Fold again.
 */
export class ConversationChangedError extends JournaldError {}

/** Whether `now` is `held`, or `held` grown by later blocks (an append merges a same-role
 * message into the last one). */
function extendsMessage(now: Message, held: Message): boolean {
  if (now.role !== held.role) return false;
  if (Buffer.from(now.contentJson).equals(Buffer.from(held.contentJson))) return true;
  const grown: unknown = JSON.parse(Buffer.from(now.contentJson).toString("utf8"));
  const before: unknown = JSON.parse(Buffer.from(held.contentJson).toString("utf8"));
  if (!Array.isArray(grown) || !Array.isArray(before) || grown.length < before.length) return false;
  return before.every((b, i) => JSON.stringify(b) === JSON.stringify(grown[i]));
}

/**
 * Messages [0, offset) of a list (`view`) paged through History. `first` is the window's
 * first message (undefined: empty window): the last page reaches it, to check that the pages
 * still line up with the window in hand.
 */
export async function earlier(
  client: Client,
  runId: string,
  view: HistoryView,
  offset: number,
  first: Message | undefined,
  firstPage: number,
  opts?: CallOpts,
): Promise<Message[]> {
  const end = offset + (first ? 1 : 0);
  const changed = () =>
    new ConversationChangedError(
      "conversation_changed",
      `run ${runId}: the conversation changed (a compaction or restore) while the ${offset} messages ` +
        "before the window were being read; read the state again (fold())",
      { metadata: { run_id: runId } },
    );
  const got: Message[] = [];
  let page = Math.max(1, firstPage);
  let ceiling = Number.MAX_SAFE_INTEGER;
  let at = 0;
  while (at < end) {
    const req = { runId, offset: at, limit: Math.min(page, end - at), view, atSeq: 0, atTime: "" };
    let resp: HistoryResponse;
    try {
      resp = await client.unary(client.rpc.history, req, opts);
    } catch (err) {
      if (err instanceof ResponseTooLargeError && page > 1) {
        page = ceiling = Math.floor(page / 2);
        continue;
      }
      throw err;
    }
    if (resp.offset !== at || resp.nextOffset <= at || resp.total < offset) throw changed();
    got.push(...resp.messages);
    at = resp.nextOffset;
    page = Math.min(perPage(resp.messages) || page, ceiling);
  }
  if (!first && at !== offset) throw changed();
  if (first && (got.length <= offset || !extendsMessage(got[offset], first))) throw changed();
  return got.slice(0, offset);
}

/** Put the messages before the state's window in front of it, in place. */
export async function completeState(client: Client, runId: string, st: RunState | undefined, opts?: CallOpts) {
  if (!st || !st.messagesOffset) return;
  const view = HistoryView.HISTORY_VIEW_STATE;
  const page = perPage(st.messages) || FIRST_PAGE;
  const before = await earlier(client, runId, view, st.messagesOffset, st.messages[0], page, opts);
  st.messages = [...before, ...st.messages];
  st.messagesOffset = 0;
}

/** Complete both windows of a Fold answer (state and governed view), in place. */
export async function completeFold(client: Client, runId: string, resp: FoldResponse, opts?: CallOpts) {
  await completeState(client, runId, resp.state, opts);
  if (!resp.governedOffset) return;
  const view = HistoryView.HISTORY_VIEW_GOVERNED;
  const page = perPage(resp.governedMessages) || FIRST_PAGE;
  const first = resp.governedMessages[0];
  const before = await earlier(client, runId, view, resp.governedOffset, first, page, opts);
  resp.governedMessages = [...before, ...resp.governedMessages];
  resp.governedOffset = 0;
}
