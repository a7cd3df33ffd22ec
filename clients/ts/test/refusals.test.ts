import { test } from "node:test";
import * as assert from "node:assert/strict";
import { InvalidRecordError, text } from "../src";

import { finish, live, startRun } from "./live";

// A record the daemon refuses arrives as InvalidRecordError whose metadata names the field,
// the seq and the run (docs/protocol.md#error-codes), and the run writes on at the same seq.
test("a refused record carries its field, seq and run id and the run writes on", live, async () => {
  const c = await startRun("ts-refused");
  try {
    const cases: [string, RegExp][] = [
      ['[{"type":"text","text":"a","text":"b"}]', /the key 'text' appears twice/],
      ['[{"type":"text","text":"\\ud800"}]', /lone UTF-16 surrogate/],
      ['[{"type":"text","text":"a","n":NaN}]', /NaN is not a JSON number/],
    ];
    for (const [content, says] of cases) {
      const refused = c.run.appendRaw({ user: { contentJson: Buffer.from(content) } });
      await assert.rejects(refused, (err: unknown) => {
        assert.ok(err instanceof InvalidRecordError, String(err));
        assert.deepEqual(
          { field: err.metadata.field, seq: err.metadata.seq, run_id: err.metadata.run_id },
          { field: "user.content_json", seq: "2", run_id: c.run.id },
        );
        assert.match(err.message, says);
        return true;
      });
    }
    const ack = await c.run.appendUser([text("the run writes on")]);
    assert.equal(ack.seq, 2);
  } finally {
    await finish(c);
  }
});
