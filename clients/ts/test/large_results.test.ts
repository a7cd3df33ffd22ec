import { test } from "node:test";
import * as assert from "node:assert/strict";
import { InvalidRecordError, RESULT_TEXT_TYPE, text, toolUse } from "../src";

import { finish, live, startRun } from "./live";

// A tool result over --max-record-bytes is refused with advice that names as_attachment;
// with asAttachment it is stored as an attachment and journaled as its block
// (docs/protocol.md#large-tool-results).
test("a tool result over the record limit is refused and goes in as an attachment", live, async () => {
  const c = await startRun("ts-big-result");
  try {
    await c.run.appendAssistant({ content: [toolUse("read_1", "read_file", "{}")], stopReason: "tool_use" });
    const big = "log line\n".repeat(Math.floor((5 * 1024 * 1024) / 9));
    await assert.rejects(c.run.appendToolResult({ toolUseId: "read_1", content: [text(big)] }), (err: unknown) => {
      assert.ok(err instanceof InvalidRecordError, String(err));
      assert.match(err.message, /as_attachment/);
      return true;
    });
    const ack = await c.run.appendToolResult({ toolUseId: "read_1", content: [text(big)], asAttachment: true });
    assert.equal(ack.seq, 3);
    const [rec] = await c.client.load(c.run.id, 3);
    const [block] = JSON.parse(Buffer.from(rec.toolResult!.contentJson).toString("utf8"));
    assert.equal(block.type, "attachment");
    assert.equal(block.media_type, RESULT_TEXT_TYPE);
    const data = await c.client.getAttachment(c.run.id, block.sha256);
    assert.equal(Buffer.from(data).toString("utf8"), big);
  } finally {
    await finish(c);
  }
});
