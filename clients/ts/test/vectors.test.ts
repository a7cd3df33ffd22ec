// The shared vectors in tests/vectors/ pin canonical JSON, fingerprint hashing and record
// encoding byte for byte across Python, Go and TypeScript (JOURNALD_VECTORS overrides).
import { test } from "node:test";
import * as assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { canonicalText, canonicalizeText, GENESIS, hashSystemPrompt, hashTools, parseJson, sha256Hex } from "../src";
import * as pb from "../src/gen/journald/v1/journal";

const dir = process.env.JOURNALD_VECTORS || path.resolve(__dirname, "..", "..", "..", "..", "tests", "vectors");

// Values are parsed with parseJson so integers beyond 2^53 stay exact.
function load(name: string): { [k: string]: unknown } {
  return parseJson(readFileSync(path.join(dir, name), "utf8")) as { [k: string]: unknown };
}

type Case = { [k: string]: unknown };

test("canonical vectors encode byte for byte", () => {
  const cases = load("canonical.json").cases as Case[];
  assert.ok(cases.length > 0);
  for (const c of cases) {
    const got = canonicalText(c.value);
    assert.equal(got, c.canonical, `case ${String(c.name)}`);
    assert.equal(sha256Hex(Buffer.from(got, "utf8")), c.sha256, `case ${String(c.name)}`);
    assert.equal(canonicalizeText(got), got, `case ${String(c.name)} is a fixed point`);
  }
});

test("fingerprint vectors hash the same", () => {
  const cases = load("fingerprint.json").cases as Case[];
  assert.ok(cases.length > 0);
  for (const c of cases) {
    assert.equal(hashSystemPrompt(c.system_prompt as string[]), c.system_prompt_sha256, `case ${String(c.name)}`);
    assert.equal(hashTools(c.tools as unknown[]), c.tools_sha256, `case ${String(c.name)}`);
  }
});

test("record vectors encode byte for byte and chain by prev", () => {
  const file = load("records.json");
  const cases = file.cases as Case[];
  assert.ok(cases.length > 0);
  for (const c of cases) {
    const got = canonicalText(c.record);
    assert.equal(got, c.canonical, `case ${String(c.name)}`);
    assert.equal(sha256Hex(Buffer.from(got, "utf8")), c.sha256, `case ${String(c.name)}`);
  }
  let prev = GENESIS;
  for (const rec of (file.chain as Case[]) ?? []) {
    assert.equal(rec.prev, prev);
    prev = sha256Hex(Buffer.from(canonicalText(rec), "utf8"));
  }
});

test("state record vectors carry the value bytes as standard base64 through the wire type", () => {
  const cases = (load("records.json").cases as Case[]).filter((c) => (c.record as Case).state);
  assert.ok(cases.length >= 3);
  for (const c of cases) {
    const st = (c.record as Case).state as Case;
    if (typeof st.data !== "string") continue;
    const sent = pb.StatePayload.fromPartial({ namespace: st.namespace as string, key: st.key as string, type: st.type as string, data: Buffer.from(st.data, "base64") });
    const back = pb.StatePayload.decode(pb.StatePayload.encode(sent).finish());
    assert.equal(Buffer.from(back.data).toString("base64"), st.data, `case ${String(c.name)}`);
  }
});
