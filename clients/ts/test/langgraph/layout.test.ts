/** The pure parts of the LangGraph.js saver: versions, run ids, the thread index. */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import { compareChannelVersions, maxChannelVersion } from "@langchain/langgraph-checkpoint";
import { NS_CHECKPOINT, NS_WRITES, nextVersion, runIdFor, stateKey, ThreadIndex } from "../../src/langgraph/layout";

test("channel versions grow as LangGraph compares them and two branches from one version never get the same one", () => {
  let v: string | undefined;
  const chain: string[] = [];
  for (let i = 0; i < 120; i++) chain.push((v = nextVersion(v)));
  for (let i = 1; i < chain.length; i++) {
    // LangGraph.js compares versions both ways: compareChannelVersions and a plain `>`
    assert.equal(compareChannelVersions(chain[i], chain[i - 1]), 1, chain[i]);
    assert.ok(chain[i] > chain[i - 1] && chain[i] > "", chain[i]);
  }
  assert.equal(maxChannelVersion(...[...chain].reverse()), chain[chain.length - 1]);
  const [a, b] = [nextVersion(chain[9]), nextVersion(chain[9])];
  assert.notEqual(a, b);
  assert.equal(a.split(".")[0], b.split(".")[0], "both are the same step");
  assert.match(nextVersion(7), /^0{31}8\.[0-9a-f]{16}$/, "an integer version goes on at its next step");
});

test("a thread's run is its own id when that is a safe run id, else lg- and a digest; an oa- id never names a session's run", () => {
  const digest = (s: string) => "lg-" + createHash("sha256").update(s, "utf8").digest("hex").slice(0, 40);
  assert.equal(runIdFor("thread-1_A"), "thread-1_A");
  assert.equal(runIdFor("user/42 chat"), digest("user/42 chat"));
  assert.equal(runIdFor("x".repeat(129)), digest("x".repeat(129)));
  assert.equal(runIdFor("oa-abc"), digest("\u0000oa-abc"));
});

test("the thread index follows deletions: a key, a replaced special write, a whole namespace", () => {
  const ref = (t: string) => ({ type: t, data: new Uint8Array([1]), sha256: "", size: 0 });
  const index = new ThreadIndex();
  index.apply(NS_CHECKPOINT, stateKey("", "c1"), ref("json"));
  index.apply(NS_CHECKPOINT, stateKey("", "c2"), ref("json"));
  const w1 = stateKey("", "c2", "task", -1, "__error__", "");
  index.apply(NS_WRITES, w1, ref("json"));
  index.apply(NS_WRITES, stateKey("", "c2", "task", 0, "messages", "~a"), ref("json"));
  assert.equal(index.latest(""), "c2");
  assert.deepEqual(index.writesOf("", "c2").map((w) => w.channel), ["__error__", "messages"]);
  index.apply(NS_WRITES, w1, undefined);
  assert.deepEqual(index.writesOf("", "c2").map((w) => w.channel), ["messages"]);
  index.apply(NS_CHECKPOINT, stateKey("", "c2"), undefined);
  assert.equal(index.latest(""), "c1");
  index.apply(NS_CHECKPOINT, "", undefined);
  assert.deepEqual(index.namespaces(), []);
  index.apply("langgraph.checkpoint", "not json", ref("json")); // another framework's key
  assert.deepEqual(index.namespaces(), []);
});
