import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { stringify } from "yaml";
import { MAX_SUBMISSION_BYTES, parseSubmission, Rejection } from "../../actors/planner/plan.js";
import { RunConfigSchema } from "../../protocol/config.js";
import { hostileString, mutated, nest, PLANTED_SECRETS } from "../helpers/hostile.js";

const enc = (s: string) => new TextEncoder().encode(s);
const good = {
  name: "r",
  harnesses: [{ name: "h", adapter: "command" }],
  models: [{ name: "m", prices: { input_per_mtok: 1, output_per_mtok: 2 } }],
  tasks: ["t"],
};

describe("run submissions", () => {
  it("accepts JSON and YAML", () => {
    assert.equal(parseSubmission(enc(JSON.stringify(good))).name, "r");
    assert.equal(
      parseSubmission(
        enc(
          "name: r\nharnesses: [{name: h, adapter: command}]\nmodels: [{name: m, prices: {input_per_mtok: 1, output_per_mtok: 2}}]\ntasks: [t]\n",
        ),
      ).repeats,
      1,
    );
  });
  it("lists every problem with its path", () => {
    try {
      parseSubmission(
        enc(
          JSON.stringify({ ...good, repeats: -1, parallel_runs: "x", extra: 1, models: [{ name: "a b" }] }),
        ),
      );
      assert.fail("should reject");
    } catch (err) {
      assert.ok(err instanceof Rejection);
      assert.equal(err.runName, "r");
      const paths = err.issues.map((i) => i.path);
      for (const p of ["repeats", "parallel_runs", "models[0].name"])
        assert.ok(paths.includes(p), `${p} in ${paths}`);
      assert.ok(
        err.issues.some((i) => /extra/.test(i.reason)),
        JSON.stringify(err.issues),
      );
    }
  });
  it("refuses oversized, empty, binary, non-object payloads with a reason", () => {
    const cases: Array<[Uint8Array, RegExp]> = [
      [new Uint8Array(MAX_SUBMISSION_BYTES + 1), /limit is/],
      [enc("   "), /empty/],
      [new Uint8Array([0xff, 0xfe, 0x00]), /UTF-8/],
      [enc("[1,2]"), /got a list/],
      [enc("42"), /not a run config/],
      [enc("{ bad json"), /not valid JSON/],
      [enc("a: [unclosed"), /not valid YAML/],
    ];
    for (const [data, re] of cases)
      assert.throws(
        () => parseSubmission(data),
        (e: unknown) => e instanceof Rejection && re.test(`${e.message} ${JSON.stringify(e.issues)}`),
      );
  });
  it("never crashes on arbitrary input: it plans or rejects with reasons", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.json(),
          fc.string(),
          fc.uint8Array({ maxLength: 512 }).map((a) => a),
        ),
        (input) => {
          const data = typeof input === "string" ? enc(input) : input;
          try {
            parseSubmission(data);
          } catch (err) {
            assert.ok(err instanceof Rejection, String(err));
            assert.ok(err.issues.length > 0);
            assert.ok(err.issues.every((i) => i.reason.length > 0));
          }
        },
      ),
      { numRuns: 1000 },
    );
  });
  it("rejects hostile names in every name field", () => {
    for (const bad of ["..", "a/b", "*", ">", "a b", "x\u0007", "..\\evil"]) {
      const cfg = {
        ...good,
        name: bad,
        harnesses: [{ name: bad, adapter: "command" }],
        models: [{ name: bad }],
      };
      assert.throws(
        () => parseSubmission(enc(JSON.stringify(cfg))),
        (e: unknown) => e instanceof Rejection && e.issues.length >= 3,
      );
    }
  });
});

describe("money limits", () => {
  it("refuses a budget larger than evalfleet can hold exactly, as a rejection with a reason", () => {
    const big = { ...good, budget_usd: 10_000_000 };
    assert.throws(
      () => parseSubmission(enc(JSON.stringify(big))),
      (e: unknown) =>
        e instanceof Rejection && e.issues.some((i) => i.path === "budget_usd" && /at most/.test(i.reason)),
    );
  });
});

/** A full, valid run config: every field a mutation can break. */
const full = {
  name: "full-run",
  harnesses: [
    {
      name: "cmd",
      adapter: "command",
      settings: { command: "true", env: { A: "1" }, args: ["x"] },
    },
  ],
  models: [
    {
      name: "claude-sonnet-4.5",
      role: "implementation",
      cost_mode: "platform",
      provider: "anthropic",
      alias: "sonnet",
      prices: { input_per_mtok: 3, output_per_mtok: 15, cache_read_per_mtok: 0.3 },
    },
  ],
  tasks: ["a", "b"],
  task_library_path: "tasks",
  repeats: 2,
  parallel_runs: 4,
  budget_usd: 10,
  max_turns: 5,
  max_cost_usd: 1,
  timeout_seconds: 60,
  judge: { model: "claude-sonnet-4.5" },
};

/** A document as YAML; JSON (also YAML) when it is too deep for the YAML writer. */
function yamlText(doc: unknown): string {
  try {
    return stringify(doc ?? null, { aliasDuplicateObjects: false });
  } catch {
    return JSON.stringify(doc ?? null);
  }
}

/**
 * What every outcome must satisfy: a plan that survives being stored (JSON) and read back by a task, or a
 * Rejection whose every issue names where and what, and never quotes a secret.
 */
function checkOutcome(data: Uint8Array): void {
  let config: unknown;
  try {
    config = parseSubmission(data);
  } catch (err) {
    assert.ok(err instanceof Rejection, `not a Rejection: ${String(err)}`);
    assert.ok(err.issues.length > 0);
    for (const i of err.issues) {
      assert.ok(i.reason.trim().length > 0, JSON.stringify(i));
      // At the root of a document that parsed, the reason names the key.
      const parsed = !/not valid|not UTF-8|empty|limit|not a run config/.test(err.message);
      if (i.path === "" && parsed) assert.match(i.reason, /key/i, JSON.stringify(i));
    }
    const shown = JSON.stringify({ message: err.message, issues: err.issues, run: err.runName });
    for (const s of PLANTED_SECRETS) assert.ok(!shown.includes(s), `rejection quotes a secret: ${shown}`);
    return;
  }
  const stored = JSON.stringify(config);
  assert.deepEqual(RunConfigSchema.parse(JSON.parse(stored)), JSON.parse(stored));
  for (const s of PLANTED_SECRETS)
    assert.ok(!stored.includes(s), `an accepted config holds a secret: ${stored}`);
}

describe("run submissions: hostile input (property-based)", () => {
  it("the full example is valid", () => {
    assert.equal(parseSubmission(enc(JSON.stringify(full))).name, "full-run");
  });

  it("a valid config mutated anywhere, as JSON or YAML: planned and storable, or rejected with reasons", () => {
    fc.assert(
      fc.property(mutated(full), fc.boolean(), (doc, yaml) => {
        checkOutcome(enc(yaml ? yamlText(doc) : JSON.stringify(doc ?? null)));
      }),
      { numRuns: 2000 },
    );
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    assert.equal(Object.getOwnPropertyNames(Object.prototype).includes("polluted"), false);
  });

  it("YAML-ish text: tags, anchors, aliases, odd scalars, broken structure", () => {
    const fragment = fc.constantFrom(
      "!!binary aGVsbG8=",
      "!!set {a, b}",
      "!!omap [a: 1]",
      "!!js/function 'x'",
      "&a [*a]",
      "*undefined_alias",
      ".inf",
      "-.inf",
      ".nan",
      "0x1F",
      "1e400",
      "~",
      "'unclosed",
      "[unclosed",
      "{a: 1, a: 2}",
      "? [a, b]\n: 1",
      "|\n  block",
      "__proto__",
      "{__proto__: {polluted: 1}}",
      "{constructor: {prototype: {polluted: 1}}}",
    );
    const field = fc.constantFrom(
      "name",
      "harnesses",
      "models",
      "tasks",
      "repeats",
      "settings",
      "__proto__",
      "x",
    );
    fc.assert(
      fc.property(
        fc.array(fc.tuple(field, fc.oneof(fragment, hostileString())), { maxLength: 6 }),
        (pairs) => {
          const base =
            "name: r\nharnesses: [{name: h, adapter: command}]\nmodels: [{name: m, prices: {input_per_mtok: 1, output_per_mtok: 2}}]\ntasks: [t]\n";
          const text = base + pairs.map(([k, v]) => `${k}: ${v}`).join("\n");
          checkOutcome(enc(text));
        },
      ),
      { numRuns: 1000 },
    );
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  });

  it("nesting too deep for JSON.stringify or the YAML parser, and YAML aliases that refer to themselves", () => {
    const inSettings = (v: unknown) => ({
      ...good,
      harnesses: [{ name: "h", adapter: "command", settings: { v } }],
    });
    for (const data of [
      enc(JSON.stringify(inSettings(nest(40)))),
      enc(
        `{"name":"r","harnesses":[{"name":"h","adapter":"command","settings":{"x":${"[".repeat(100_000)}${"]".repeat(100_000)}}}],"models":[{"name":"m"}],"tasks":["t"]}`,
      ),
      enc(
        `name: r\nharnesses: [{name: h, adapter: command, settings: {x: ${"[".repeat(5000)}${"]".repeat(5000)}}}]\n`,
      ),
      enc(
        "name: r\nharnesses: [{name: h, adapter: command, settings: &s {x: *s}}]\nmodels: [{name: m, prices: {input_per_mtok: 1, output_per_mtok: 2}}]\ntasks: [t]\n",
      ),
      enc(
        "name: r\nharnesses: &h [{name: h, adapter: command, settings: {x: *h}}]\nmodels: [{name: m, prices: {input_per_mtok: 1, output_per_mtok: 2}}]\ntasks: [t]\n",
      ),
    ]) {
      checkOutcome(data);
      assert.throws(
        () => parseSubmission(data),
        (e: unknown) => e instanceof Rejection && e.issues.some((i) => /nested/.test(i.reason)),
      );
    }
    // Twenty levels is fine: settings may be structured.
    assert.equal(parseSubmission(enc(JSON.stringify(inSettings(nest(20))))).name, "r");
  });

  it("huge strings within the size limit are taken or refused, never crash", () => {
    for (const at of ["name", "task_library_path", "tasks", "docker_image"]) {
      const doc = { ...good, [at]: at === "tasks" ? ["t".repeat(200_000)] : "x".repeat(200_000) };
      checkOutcome(enc(JSON.stringify(doc)));
    }
  });

  it("a secret anywhere in a config is refused where it is, without being quoted", () => {
    for (const secret of [
      ...PLANTED_SECRETS,
      "Authorization: Bearer abcdefghijklmnop",
      "OPENAI_API_KEY=x1",
    ]) {
      const doc = {
        ...good,
        harnesses: [
          { name: "h", adapter: "command", settings: { env: { KEY: secret }, args: [`--key=${secret}`] } },
        ],
        [secret]: 1,
      };
      try {
        parseSubmission(enc(JSON.stringify(doc)));
        assert.fail("should reject");
      } catch (err) {
        assert.ok(err instanceof Rejection);
        const paths = err.issues.map((i) => i.path);
        assert.ok(paths.includes("harnesses[0].settings.env.KEY"), paths.join(", "));
        assert.ok(paths.includes("harnesses[0].settings.args[0]"), paths.join(", "));
        assert.ok(JSON.stringify(err).indexOf(secret) === -1, JSON.stringify(err));
        assert.ok(err.issues.some((i) => /looks like a secret/.test(i.reason)));
      }
    }
    // A run named like a key cannot even be named in the rejection (it would become a subject and a KV key).
    const named = { ...good, name: PLANTED_SECRETS[0] };
    assert.throws(
      () => parseSubmission(enc(JSON.stringify(named))),
      (e: unknown) => e instanceof Rejection && e.runName === undefined && e.issues[0]?.path === "name",
    );
  });

  it("names that are JavaScript object properties are refused (they key plain objects everywhere)", () => {
    for (const bad of ["__proto__", "constructor", "toString", "hasOwnProperty"]) {
      const doc = { ...good, models: [{ name: bad }] };
      assert.throws(
        () => parseSubmission(enc(JSON.stringify(doc))),
        (e: unknown) =>
          e instanceof Rejection &&
          e.issues.some((i) => i.path === "models[0].name" && /reserved/.test(i.reason)),
      );
    }
  });
});
