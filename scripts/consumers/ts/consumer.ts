// A program outside the journald checkout that uses the npm package as installed from its
// `npm pack` tarball. scripts/check_client_packages.sh compiles it against the installed
// type declarations and runs it on tests/vectors/fingerprint.json: it exits non-zero unless
// the package computes every vector's hashes and maps every ErrorCode of the proto.
import { readFileSync } from "node:fs";
import { ERRORS_BY_CODE, hashSystemPrompt, hashTools, parseJson, pb } from "@journald/client";

interface VectorCase {
  name: string;
  system_prompt: string[];
  tools: unknown[];
  system_prompt_sha256: string;
  tools_sha256: string;
}

const doc = parseJson(readFileSync(process.argv[2], "utf8")) as unknown as { cases: VectorCase[] };
for (const c of doc.cases) {
  const prompt = hashSystemPrompt(c.system_prompt);
  const tools = hashTools(c.tools);
  if (prompt !== c.system_prompt_sha256 || tools !== c.tools_sha256) {
    throw new Error(`vector ${c.name}: got ${prompt} / ${tools}`);
  }
}
const words = Object.keys(pb.ErrorCode)
  .filter((k) => /^ERROR_CODE_/.test(k) && k !== "ERROR_CODE_UNSPECIFIED")
  .map((k) => k.slice("ERROR_CODE_".length).toLowerCase());
for (const word of words) {
  if (!(word in ERRORS_BY_CODE)) throw new Error(`no error class for ${word}`);
}
console.log(`npm package outside the checkout: ${doc.cases.length} fingerprint vectors, ${words.length} error codes`);
