import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { describe, it } from "node:test";
import fc from "fast-check";
import { loadSettings } from "../../config/index.js";
import { createLogger } from "../../lib/log.js";
import {
  MAX_STREAM_BYTES,
  redactSecrets,
  redactValue,
  sanitizeOutput,
  secretsFromEnv,
  truncateTail,
  withoutSecrets,
} from "../../protocol/redact.js";

describe("redaction", () => {
  const secrets = [
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
    "sk-proj-ABCDEFGHIJKLMNOPQRSTUV",
    "efk-0123456789abcdef0123",
  ];
  it("removes sk- keys, bearer tokens, key headers and secret env assignments", () => {
    const text = [
      `using key ${secrets[0]} now`,
      `Authorization: Bearer abcdefghijklmnopqrstuvwxyz`,
      `x-api-key: ${secrets[1]}`,
      `ANTHROPIC_API_KEY=supersecretvalue123`,
      `export OPENAI_API_KEY="another-secret-value"`,
      `CLAUDE_CODE_OAUTH_TOKEN: oauthtokenvalue999`,
      `run key ${secrets[2]}`,
    ].join("\n");
    const out = redactSecrets(text);
    for (const s of [
      ...secrets,
      "abcdefghijklmnopqrstuvwxyz",
      "supersecretvalue123",
      "another-secret-value",
      "oauthtokenvalue999",
    ])
      assert.ok(!out.includes(s), `${s} leaked:\n${out}`);
    assert.match(out, /ANTHROPIC_API_KEY=\[REDACTED\]/);
  });
  it("redacts caller-supplied secrets verbatim", () => {
    assert.equal(redactSecrets("token=hunter2hunter2!", ["hunter2hunter2"]), "token=[REDACTED]!");
  });
  it("keeps the last 50 KB with a truncation notice, on a character boundary", () => {
    const text = "é".repeat(40_000);
    const out = truncateTail(text);
    assert.match(out, /^\[truncated: \d+ of 80000 bytes omitted/);
    const body = out.slice(out.indexOf("\n") + 1);
    assert.ok(Buffer.byteLength(body) <= MAX_STREAM_BYTES);
    assert.ok(!body.includes("\uFFFD"));
    assert.equal(truncateTail("short"), "short");
  });
  it("sanitizeOutput redacts before cutting, so a key straddling the cut cannot survive", () => {
    const key = "sk-abcdefghijklmnopqrstuvwxyz0123456789";
    const text = `${"x".repeat(MAX_STREAM_BYTES - 10)} ${key}`;
    assert.ok(!sanitizeOutput(text).includes("sk-abcdefgh"));
  });
});

/** Distinctive secrets of every shape evalfleet must never store (fixtures, not real keys). */
const PLANTED = [
  "sk-ant-api03-PLANTEDabcdefghijklmnopqrstuvwxyz0123",
  "sk-proj-PLANTEDabcdefghijklmnopqrstuv",
  "efk-PLANTED0123456789abcdefghijklmnopqrstuvw",
  "AKIAPLANTED0EXAMPLE1",
  `SU${"APLANTEDSEED".padEnd(56, "A")}`,
];

describe("redaction of serialised text", () => {
  it("a key right after a JSON or URL escape is still a key (\\n, \\t, \\u001b, %0A)", () => {
    for (const s of PLANTED)
      for (const before of ["\n", "\t", "\r", "\u001b", "\u0000"]) {
        const json = JSON.stringify({ text: `key:${before}${s} end` });
        assert.ok(!redactSecrets(json).includes(s), `${JSON.stringify(before)} ${s}: ${redactSecrets(json)}`);
      }
    assert.equal(redactSecrets("a%0Ask-ant-api03-PLANTEDabcdefgh"), "a%0A[REDACTED]");
  });

  it("wherever a key sits in text, neither the text nor its JSON keeps it (property)", () => {
    const sep = fc.constantFrom(" ", "\n", "\t", '"', "'", "=", ":", "(", "[", "{", ",", "/", "\\", "\u0007");
    fc.assert(
      fc.property(fc.string(), sep, fc.constantFrom(...PLANTED), sep, fc.string(), (a, s1, key, s2, b) => {
        const text = `${a}${s1}${key}${s2}${b}`;
        assert.ok(!redactSecrets(text).includes(key), text);
        assert.ok(!redactSecrets(JSON.stringify(text)).includes(key), text);
        assert.ok(!redactSecrets(JSON.stringify({ [text]: [text] })).includes(key), text);
      }),
      { numRuns: 1000 },
    );
  });

  it("keeps the rest of the text: words that merely contain sk- are not keys", () => {
    assert.equal(
      redactSecrets("task-abcdefghij desk-lamp-0123456789"),
      "task-abcdefghij desk-lamp-0123456789",
    );
    assert.equal(
      redactSecrets("connect postgres://evalfleet:hunter2-pw@db:5432/x and postgres://postgres@h/y"),
      "connect postgres://evalfleet:[REDACTED]@db:5432/x and postgres://postgres@h/y",
    );
  });

  it("redactValue redacts keys and values, keeps errors' messages, and never throws", () => {
    const err = new Error(`upstream refused ${PLANTED[0]}`, { cause: new Error(`Bearer ${PLANTED[1]}`) });
    const cyclic: Record<string, unknown> = { [PLANTED[2]!]: PLANTED[3], err, n: 10n, d: new Date(0) };
    cyclic.self = cyclic;
    let deep: unknown = "bottom";
    for (let i = 0; i < 100_000; i++) deep = [deep];
    const out = redactValue({ cyclic, deep }) as { cyclic: Record<string, unknown> };
    const text = JSON.stringify(out, (_k, v) => (typeof v === "bigint" ? String(v) : v));
    for (const s of PLANTED) assert.ok(!text.includes(s), text);
    assert.match(text, /upstream refused \[REDACTED\]/);
    assert.equal(out.cyclic.self, "[Circular]");
    assert.equal(out.cyclic.n, 10n);
    assert.match(text, /\[Too deep\]/);
  });

  it("the environment's own secrets are known, and code evalfleet did not write never gets them", () => {
    const env = {
      PATH: "/bin",
      ANTHROPIC_API_KEY: "not-shaped-like-a-key-1",
      DATABASE_URL: "postgres://u:p@h/d",
      NATS_URL: "nats://u:p@h",
      EVALFLEET_RUN_KEY: "x",
      HOME: "/h",
    };
    assert.deepEqual(secretsFromEnv(env), ["not-shaped-like-a-key-1"]);
    assert.deepEqual(withoutSecrets(env), { PATH: "/bin", HOME: "/h" });
  });
});

describe("the logger", () => {
  const capture = () => {
    let out = "";
    const destination = new Writable({
      write(chunk, _enc, cb) {
        out += String(chunk);
        cb();
      },
    });
    return { destination, text: () => out };
  };

  it("scrubs messages, fields, child bindings and errors, and keeps errors readable", () => {
    const c = capture();
    const log = createLogger({ name: "t", level: "debug", destination: c.destination });
    log.warn({ err: new Error(`failed with ${PLANTED[0]}`) }, "call failed");
    log.error(new Error(`bare\n${PLANTED[1]}`));
    log.child({ key: PLANTED[2] }).info({ nested: { list: [`x\n${PLANTED[3]}`] } }, `seed ${PLANTED[4]}`);
    log.info("%s and %s", `Authorization: Bearer ${PLANTED[1]}`, "ok");
    const lines = c.text().trim().split("\n");
    assert.equal(lines.length, 4);
    for (const s of PLANTED) assert.ok(!c.text().includes(s), c.text());
    const first = JSON.parse(lines[0]!) as { err: { message: string; stack: string } };
    assert.equal(first.err.message, "failed with [REDACTED]");
    assert.match(first.err.stack, /^Error: failed with \[REDACTED\]/);
    assert.equal((JSON.parse(lines[1]!) as { msg: string }).msg, "bare\n[REDACTED]");
  });

  it("redacts this process's own keys verbatim, whatever their shape", () => {
    // Registered when a role's settings are loaded: every secret setting's value, and the well-known variables.
    loadSettings("shim", {
      env: { EVALFLEET_RUN_KEY: "plain-words-run-key", GEMINI_API_KEY: "plain-words-gemini" },
    });
    const c = capture();
    createLogger({ name: "t", destination: c.destination }).info(
      { k: "plain-words-run-key" },
      "plain-words-gemini",
    );
    assert.ok(!c.text().includes("plain-words-run-key"), c.text());
    assert.ok(!c.text().includes("plain-words-gemini"), c.text());
  });

  it("never throws on what it is given (circular fields, BigInt)", () => {
    const c = capture();
    const o: Record<string, unknown> = { a: 1 };
    o.self = o;
    const log = createLogger({ name: "t", destination: c.destination });
    assert.doesNotThrow(() => log.info({ o, n: 12n }, "odd fields"));
    assert.match(c.text(), /"self":"\[Circular\]"/);
  });
});
