/**
 * Canonical JSON (docs/protocol.md#canonical-json): UTF-8, object keys sorted by Unicode code point, separators
 * "," and ":", no insignificant whitespace, non-ASCII written as itself, integers only.
 * Byte for byte what Python's json.dumps(sort_keys=True, separators=(",", ":"),
 * ensure_ascii=False) writes.
 *
 * Two JavaScript traps are handled: keys are sorted by code point, not by UTF-16 code
 * unit (the two orders differ for astral characters such as emoji), and integers beyond
 * 2^53 are kept exact (parseJson yields bigint for them; canonical accepts bigint).
 */
import { createHash } from "node:crypto";

/** A JSON value with exact integers. */
export type JsonValue =
  | null
  | boolean
  | number
  | bigint
  | string
  | JsonValue[]
  | { [key: string]: JsonValue };

/** Compare two strings by Unicode code point. */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    // A surrogate (part of an astral character, >= U+10000) sorts after every BMP code
    // point, although U+E000..U+FFFF are larger code units.
    const xs = x >= 0xd800 && x <= 0xdfff;
    const ys = y >= 0xd800 && y <= 0xdfff;
    if (xs !== ys) return xs ? 1 : -1;
    return x - y;
  }
  return a.length - b.length;
}

function checkWellFormed(s: string): void {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        i++;
        continue;
      }
      throw new TypeError("canonical JSON strings must be valid Unicode (lone surrogate)");
    }
    if (c >= 0xdc00 && c <= 0xdfff) {
      throw new TypeError("canonical JSON strings must be valid Unicode (lone surrogate)");
    }
  }
}

function writeString(s: string): string {
  checkWellFormed(s);
  // JSON.stringify escapes exactly the quote, the backslash and C0 controls (short forms
  // for \b \f \n \r \t, \u00xx lowercase otherwise), and leaves U+2028/2029 alone.
  return JSON.stringify(s);
}

function write(v: unknown, out: string[]): void {
  if (v === null) {
    out.push("null");
  } else if (typeof v === "boolean") {
    out.push(v ? "true" : "false");
  } else if (typeof v === "string") {
    out.push(writeString(v));
  } else if (typeof v === "bigint") {
    out.push(v.toString());
  } else if (typeof v === "number") {
    if (!Number.isInteger(v)) {
      throw new TypeError(`canonical JSON holds integers only, got ${v}`);
    }
    if (!Number.isSafeInteger(v)) {
      throw new TypeError(`integer ${v} is beyond 2^53; pass it as a bigint`);
    }
    out.push(Object.is(v, -0) ? "0" : String(v));
  } else if (Array.isArray(v)) {
    out.push("[");
    v.forEach((item, i) => {
      if (i > 0) out.push(",");
      write(item === undefined ? null : item, out);
    });
    out.push("]");
  } else if (v instanceof Uint8Array) {
    throw new TypeError("canonical JSON cannot hold bytes; decode them first");
  } else if (typeof v === "object") {
    const obj = v as Record<string, unknown>;
    const keys = Object.keys(obj)
      .filter((k) => obj[k] !== undefined)
      .sort(compareCodePoints);
    out.push("{");
    keys.forEach((k, i) => {
      if (i > 0) out.push(",");
      out.push(writeString(k), ":");
      write(obj[k], out);
    });
    out.push("}");
  } else {
    throw new TypeError(`${typeof v} cannot be encoded as canonical JSON`);
  }
}

/** The canonical JSON text of a value. */
export function canonicalText(v: unknown): string {
  const out: string[] = [];
  write(v, out);
  return out.join("");
}

/** The canonical JSON bytes (UTF-8) of a value. */
export function canonical(v: unknown): Buffer {
  return Buffer.from(canonicalText(v), "utf8");
}

/** Lowercase hex SHA-256. */
export function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

/** Parse JSON text keeping integers exact: safe integers as number, larger as bigint.
 * Fractions and exponents are refused (records carry no floats). */
export function parseJson(text: string): JsonValue {
  let i = 0;
  const fail = (what: string): never => {
    throw new SyntaxError(`invalid JSON at ${i}: ${what}`);
  };
  const ws = () => {
    while (i < text.length && " \t\n\r".includes(text[i])) i++;
  };
  const value = (): JsonValue => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const obj: { [k: string]: JsonValue } = {};
      ws();
      if (text[i] === "}") {
        i++;
        return obj;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("expected a key");
        const k = str();
        ws();
        if (text[i] !== ":") fail("expected ':'");
        i++;
        Object.defineProperty(obj, k, { value: value(), enumerable: true, writable: true, configurable: true });
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i] === "}") {
          i++;
          return obj;
        }
        fail("expected ',' or '}'");
      }
    }
    if (c === "[") {
      i++;
      const arr: JsonValue[] = [];
      ws();
      if (text[i] === "]") {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value());
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i] === "]") {
          i++;
          return arr;
        }
        fail("expected ',' or ']'");
      }
    }
    if (c === '"') return str();
    if (text.startsWith("true", i)) {
      i += 4;
      return true;
    }
    if (text.startsWith("false", i)) {
      i += 5;
      return false;
    }
    if (text.startsWith("null", i)) {
      i += 4;
      return null;
    }
    const m = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 400));
    if (!m) return fail("unexpected character");
    if (m[2] !== undefined || m[3] !== undefined) {
      throw new TypeError(`canonical JSON holds integers only, got ${m[0]}`);
    }
    i += m[0].length;
    const n = BigInt(m[0]);
    return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
  };
  const str = (): string => {
    const start = i;
    i++;
    let simple = true;
    while (i < text.length && text[i] !== '"') {
      if (text[i] === "\\") {
        simple = false;
        i++;
      }
      i++;
    }
    if (i >= text.length) fail("unterminated string");
    i++;
    const lit = text.slice(start, i);
    if (!simple) return JSON.parse(lit) as string; // refuses raw control characters too
    if (/[\u0000-\u001f]/.test(lit)) fail("raw control character in a string");
    return lit.slice(1, -1);
  };
  const v = value();
  ws();
  if (i !== text.length) fail("trailing data");
  return v;
}

/** Parse JSON text and return its canonical text. */
export function canonicalizeText(text: string): string {
  return canonicalText(parseJson(text));
}

/** The `prev` of seq 1: 64 zeros. */
export const GENESIS = "0".repeat(64);
