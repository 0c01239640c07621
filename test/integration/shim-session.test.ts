import assert from "node:assert/strict";
import { test } from "node:test";
import { Agent, request } from "undici";
import type { Reply, ScriptedRequest } from "../../scripted-provider/index.js";
import { readLedger, startRig, sum } from "./shim-fixture.js";

/** A small seeded PRNG so the session is the same every run. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The provider's side of the session: a mix of clean replies with cache tokens, overloads, cuts and errors. */
function scenario(): (req: ScriptedRequest) => Reply {
  const r = rng(42);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  return () => {
    const x = r();
    const usage = {
      input: 1 + Math.floor(r() * 5000),
      cacheRead: pick([0, 0, 1024, 30_000]),
      cacheWrite5m: pick([0, 0, 2048]),
      cacheWrite1h: pick([0, 512]),
      reasoning: pick([0, 7]),
    };
    const text = "The quick brown fox jumps over the lazy dog. ".repeat(1 + Math.floor(r() * 4));
    const toolCalls =
      r() < 0.2
        ? [{ name: "Edit", input: { file_path: "/w/a.py", old_string: "a", new_string: "b" } }]
        : undefined;
    const base: Reply = { text, usage, ...(toolCalls ? { toolCalls } : {}) };
    if (x < 0.06) return { error: { status: 429, retryAfterS: 0 } };
    if (x < 0.1) return { error: { status: 529 } };
    if (x < 0.13) return { error: { status: 503 } };
    if (x < 0.17) return { ...base, overloadedInStream: true };
    if (x < 0.23) return { ...base, cutAfterDeltas: Math.floor(r() * 6) };
    if (x < 0.27) return { ...base, errorAfterDeltas: Math.floor(r() * 6) };
    return base;
  };
}

const MODELS = [
  "claude-sonnet-4-5",
  "claude-haiku-4-5",
  "claude-opus-4-1",
  "gpt-4o",
  "gpt-4o-mini",
  "gpt-5",
  "o4-mini",
];

interface CallSpec {
  path: string;
  body: Record<string, unknown>;
  headers: Record<string, string>;
}

function callSpec(i: number, r: () => number): CallSpec {
  const model = MODELS[i % MODELS.length]!;
  const stream = r() < 0.7;
  const messages = [{ role: "user", content: `call ${i}: ${"context ".repeat(Math.floor(r() * 50))}` }];
  if (model.startsWith("claude")) {
    return {
      path: "/v1/messages",
      body: { model, max_tokens: 1024, stream, messages },
      headers: { "x-api-key": "dummy", "anthropic-version": "2023-06-01" },
    };
  }
  const auth = { authorization: "Bearer dummy" };
  if (r() < 0.5) {
    const so = stream && r() < 0.5 ? { stream_options: { include_usage: true } } : {};
    return { path: "/v1/chat/completions", body: { model, stream, messages, ...so }, headers: auth };
  }
  return {
    path: "/v1/responses",
    body: { model, stream, input: messages, max_output_tokens: 2048 },
    headers: auth,
  };
}

test("a 1,000-call session with retries, cache tokens and cut streams: the ledger equals the provider's bill exactly", {
  timeout: 110_000,
}, async () => {
  const rig = await startRig({
    run: "session",
    budgetNanoUsd: 10_000 * 1_000_000_000,
    retry: { baseDelayMs: 1, maxDelayMs: 5, maxRetries: 12 },
  });
  const dispatcher = new Agent({ connections: 32 });
  try {
    rig.provider.setScenario(scenario());
    const r = rng(7);
    const specs = Array.from({ length: 1000 }, (_, i) => callSpec(i, r));
    const outcomes = { ok: 0, failed: 0 };
    const statuses: number[] = [];
    let next = 0;
    const worker = async () => {
      while (next < specs.length) {
        const spec = specs[next++]!;
        try {
          const res = await request(`${rig.shim.url}${spec.path}`, {
            method: "POST",
            dispatcher,
            headers: { "content-type": "application/json", ...spec.headers },
            body: JSON.stringify(spec.body),
          });
          statuses.push(res.statusCode);
          await res.body.text();
          outcomes.ok++;
        } catch {
          outcomes.failed++; // a cut stream reaches the client as a cut
        }
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    await rig.shim.drain();
    const rows = await readLedger(rig.nc, "session");
    const bill = rig.provider.bill();
    const totals = rig.shim.totals();

    assert.equal(rig.provider.calls().length, rows.length, "one ledger row per provider call");
    assert.equal(new Set(rows.map((x) => x.callId)).size, rows.length);
    assert.equal(totals.calls, rows.length);
    assert.equal(
      sum(rows, (x) => x.costNanoUsd),
      bill.total.costNanoUsd,
    );
    assert.equal(totals.costNanoUsd, bill.total.costNanoUsd);
    assert.equal(
      sum(rows, (x) => x.inputTokens),
      bill.total.inputTokens,
    );
    assert.equal(
      sum(rows, (x) => x.outputTokens),
      bill.total.outputTokens,
    );
    assert.equal(
      sum(rows, (x) => x.cacheReadTokens),
      bill.total.cacheReadTokens,
    );
    assert.equal(
      sum(rows, (x) => x.cacheWriteTokens),
      bill.total.cacheWriteTokens,
    );
    assert.equal(
      sum(rows, (x) => x.reasoningTokens),
      bill.total.reasoningTokens,
    );
    assert.equal(rows.filter((x) => x.costNanoUsd > 0).length, bill.total.calls);

    // The harness never sees a 429 (or a 529 / 503): they are retried by the shim.
    const leaked = statuses.filter((st) => [429, 503, 529].includes(st));
    assert.deepEqual(leaked, [], `the shim let ${leaked.length} retryable statuses through to the client`);
    const count = (s: string) => rows.filter((x) => x.status === s).length;
    // Only a cut stream reaches the client as a failure: never more client failures than cuts on the bill.
    assert.ok(outcomes.failed <= count("cut"), JSON.stringify({ outcomes, cuts: count("cut") }));
    assert.ok(
      count("rate_limited") > 30 && count("overloaded") > 30 && count("cut") > 10 && count("error") > 10,
    );
    assert.ok(rows.some((x) => x.retries > 0));
    assert.ok(rows.some((x) => x.estimated && x.costNanoUsd > 0));
    assert.ok(
      rows.every((x) =>
        x.status === "rate_limited" || x.status === "overloaded" ? x.costNanoUsd === 0 : true,
      ),
    );
    assert.ok(outcomes.ok > 850, JSON.stringify(outcomes));
  } finally {
    await dispatcher.close();
    await rig.close();
  }
});
