import { test } from "node:test";
import * as assert from "node:assert/strict";
import { canonicalText, compareCodePoints, parseJson } from "../src";

test("keys sort by code point, not by UTF-16 code unit", () => {
  // U+FFFF is one code unit 0xFFFF; U+1F600 is the pair 0xD83D 0xDE00.
  assert.equal(canonicalText({ "\u{1F600}": 1, "\uffff": 2, "\ue000": 3, a: 4 }), '{"a":4,"\ue000":3,"\uffff":2,"😀":1}');
  assert.ok(compareCodePoints("\u{1F600}", "\uffff") > 0);
  assert.ok(compareCodePoints("\uffff", "\u{1F600}") < 0);
  assert.ok(compareCodePoints("\ud7ff", "\u{10000}") < 0);
  assert.equal(compareCodePoints("ab", "ab"), 0);
  assert.ok(compareCodePoints("a", "ab") < 0);
});

test("html characters and line separators are written as themselves", () => {
  assert.equal(canonicalText("<&>\u2028\u2029é"), '"<&>\u2028\u2029é"');
  assert.equal(canonicalText("\u0000\b\f\n\r\t\u001f\u007f"), '"\\u0000\\b\\f\\n\\r\\t\\u001f\u007f"');
});

test("integers beyond 2^53 stay exact through parseJson", () => {
  const v = parseJson('{"n":12345678901234567890123,"m":-9007199254740993,"s":9007199254740991}');
  assert.equal(canonicalText(v), '{"m":-9007199254740993,"n":12345678901234567890123,"s":9007199254740991}');
});

test("floats, unsafe numbers and lone surrogates are refused", () => {
  assert.throws(() => canonicalText({ x: 1.5 }), /integers only/);
  assert.throws(() => parseJson("[1e3]"), /integers only/);
  assert.throws(() => canonicalText(2 ** 60), /bigint/);
  assert.throws(() => canonicalText("\ud800"), /lone surrogate/);
  assert.throws(() => canonicalText(parseJson('"\\ud800"')), /lone surrogate/);
  assert.throws(() => parseJson('"a\nb"'), /control character/);
});
