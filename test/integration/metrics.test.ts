import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import { type Gateway, startGateway } from "../../gateway/server.js";
import { startModelCallTracing } from "../../lib/otel.js";
import { openPlane, type Plane } from "../../plane/connect.js";
import type { LedgerCall } from "../../protocol/messages.js";
import { StateKeys, Subjects } from "../../protocol/subjects.js";
import { type ScriptedProvider, startScriptedProvider } from "../../scripted-provider/index.js";
import { createRunKey } from "../../store/keys.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { ledgerCall } from "../helpers/ledger.js";
import { freePort, startNats, type TestNats } from "../helpers/nats.js";

/*
 * Prometheus /metrics, scraped as Prometheus would: the gateway's (model calls, tokens, cost, 429s) and an actor
 * process's (`evalfleet actor results-writer` with EVALFLEET_METRICS_PORT: the ledger's calls, tokens, cost, pacer
 * waits and 429s, and its consumers' queue depths).
 */

const ROOT = path.resolve(import.meta.dirname, "../..");
const UPSTREAM_KEY = "sk-upstream-metrics-test";

/** One sample's value from the exposition text, or undefined when the series is absent. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}{`)) continue;
    const m = /^[^{]+\{([^}]*)\} (\S+)$/.exec(line);
    if (!m) continue;
    const have = Object.fromEntries(
      [...m[1]!.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1]!, x[2]!]),
    );
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[2]);
  }
  return undefined;
}

async function scrape(url: string): Promise<string> {
  const res = await fetch(url);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
  return await res.text();
}

describe("Prometheus /metrics", () => {
  let fdb: FreshDb;
  let provider: ScriptedProvider;
  let gw: Gateway;

  before(async () => {
    fdb = await freshDb("metrics");
    provider = await startScriptedProvider({
      keys: [UPSTREAM_KEY],
      scenario: [
        { error: { status: 429, retryAfterS: 0 } },
        { text: "hi", usage: { input: 1200, output: 300 } },
      ],
    });
    gw = await startGateway({
      db: fdb.db,
      aliases: {
        "sonnet-m": {
          upstream: { provider: "anthropic", baseUrl: provider.url, apiKey: UPSTREAM_KEY },
          model: "claude-sonnet-4-5",
          runs: ["run-m"],
        },
      },
    });
  });
  after(async () => {
    await gw?.close();
    await provider?.close();
    await fdb?.cleanup();
  });

  it("the gateway counts every call it forwarded: outcome, 429s, tokens by kind, cost", async () => {
    const key = await createRunKey(fdb.db, "run-m");
    const client = new Anthropic({ baseURL: gw.url, apiKey: key, maxRetries: 0 });
    const ask = () =>
      client.messages.create({
        model: "sonnet-m",
        max_tokens: 1000,
        messages: [{ role: "user", content: "hi" }],
      });
    await assert.rejects(ask(), (e: { status: number }) => e.status === 429);
    await ask();
    const text = await scrape(new URL("/metrics", gw.url).toString());
    const labels = { source: "gateway", model: "claude-sonnet-4-5" };
    assert.equal(sample(text, "evalfleet_model_calls_total", { ...labels, status: "ok" }), 1);
    assert.equal(sample(text, "evalfleet_model_calls_total", { ...labels, status: "error" }), 1);
    assert.equal(sample(text, "evalfleet_model_rate_limited_total", labels), 1);
    assert.equal(sample(text, "evalfleet_model_tokens_total", { ...labels, kind: "input" }), 1200);
    assert.equal(sample(text, "evalfleet_model_tokens_total", { ...labels, kind: "output" }), 300);
    // claude-sonnet-4-5 list prices: $3 / MTok in, $15 / MTok out.
    assert.equal(sample(text, "evalfleet_model_cost_nano_usd_total", labels), 1200 * 3_000 + 300 * 15_000);
    assert.ok(
      sample(text, "process_cpu_user_seconds_total", {}) !== undefined ||
        /process_cpu_user_seconds_total \d/.test(text),
    );
  });
});

describe("an actor process's /metrics", () => {
  let nats: TestNats;
  let plane: Plane;
  let dir: string;
  let child: ChildProcess | undefined;
  let url: string;

  before(async () => {
    nats = await startNats();
    plane = await openPlane({ nats: nats.settings, name: "metrics-test" });
    dir = await mkdtemp(path.join(tmpdir(), "ef-metrics-"));
    const port = await freePort();
    url = `http://127.0.0.1:${port}/metrics`;
    const { DATABASE_URL: _pg, NODE_TEST_CONTEXT: _t, ...env } = process.env;
    child = spawn(
      process.execPath,
      [
        path.join(ROOT, "bin/evalfleet.js"),
        "actor",
        "results-writer",
        "--data-dir",
        path.join(dir, "pglite"),
      ],
      {
        cwd: ROOT,
        env: {
          ...env,
          ...nats.env,
          EVALFLEET_METRICS_PORT: String(port),
          EVALFLEET_LOG_LEVEL: "warn",
        },
        stdio: ["ignore", "ignore", "inherit"],
      },
    );
  });
  after(async () => {
    if (child && child.exitCode === null) {
      const exited = new Promise((r) => child!.once("exit", r));
      child.kill("SIGTERM");
      await exited;
    }
    await plane?.close();
    await nats?.cleanup();
    await rm(dir, { recursive: true, force: true });
  });

  const call = (callId: string, extra: Partial<LedgerCall>): LedgerCall =>
    ledgerCall({
      callId,
      run: "run-x",
      cellId: "h__m__t__r0",
      costNanoUsd: 7_000,
      pacerWaitMs: 250,
      ...extra,
    });

  it("the results-writer counts the ledger as it lands it, and reports its consumers' backlog", async () => {
    // Up: /metrics answers with this process's consumers.
    let text = "";
    for (const deadline = Date.now() + 60_000; ; ) {
      text = await fetch(url)
        .then((r) => r.text())
        .catch(() => "");
      if (sample(text, "evalfleet_queue_messages", { stream: "EF_LEDGER", state: "pending" }) !== undefined)
        break;
      if (Date.now() > deadline) throw new Error(`no queue gauge on ${url}:\n${text.slice(0, 2000)}`);
      await new Promise((r) => setTimeout(r, 250));
    }
    // What the dispatcher does before a launch: the claim the writer checks every call against.
    await plane.kv.budgets.put(
      StateKeys.claim("run-x", "h__m__t__r0", 0),
      JSON.stringify({ by: "test", gen: 1, base: 0, pool: "h__m", at: new Date().toISOString() }),
    );
    const calls = [
      call("c1", {}),
      call("c2", {
        status: "rate_limited",
        httpStatus: 429,
        inputTokens: 0,
        outputTokens: 0,
        cacheReadTokens: 0,
        cacheWriteTokens: 0,
        reasoningTokens: 0,
        costNanoUsd: 0,
      }),
    ];
    for (const c of calls)
      await plane.js.publish(Subjects.ledger.one(c.run, c.cellId, c.attempt), JSON.stringify(c), {
        msgID: c.callId,
      });
    const labels = { source: "ledger", model: "m" };
    for (const deadline = Date.now() + 60_000; ; ) {
      text = await scrape(url);
      const landed =
        (sample(text, "evalfleet_model_calls_total", { ...labels, status: "ok" }) ?? 0) +
        (sample(text, "evalfleet_model_calls_total", { ...labels, status: "rate_limited" }) ?? 0);
      if (landed === 2) break;
      if (Date.now() > deadline) throw new Error(`the ledger was not counted:\n${text.slice(0, 3000)}`);
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.equal(sample(text, "evalfleet_model_rate_limited_total", labels), 1);
    assert.equal(sample(text, "evalfleet_model_tokens_total", { ...labels, kind: "input" }), 100);
    assert.equal(sample(text, "evalfleet_model_tokens_total", { ...labels, kind: "cache_read" }), 5);
    assert.equal(sample(text, "evalfleet_model_cost_nano_usd_total", labels), 7_000);
    assert.equal(sample(text, "evalfleet_pacer_wait_ms_total", { pool: "h__m" }), 500);
    assert.equal(sample(text, "evalfleet_pacer_waited_calls_total", { pool: "h__m" }), 2);
    assert.equal(sample(text, "evalfleet_queue_messages", { stream: "EF_LEDGER", state: "pending" }), 0);
    // A redelivery lands nothing new and counts nothing twice.
    await plane.js.publish(Subjects.ledger.one("run-x", "h__m__t__r0", 0), JSON.stringify(calls[0]));
    await new Promise((r) => setTimeout(r, 1_500));
    assert.equal(sample(await scrape(url), "evalfleet_model_calls_total", { ...labels, status: "ok" }), 1);
  });
});

describe("OpenTelemetry export of model calls (GenAI semantic conventions)", () => {
  it("sends one CLIENT span per forwarded call to the OTLP/HTTP collector", async () => {
    const bodies: unknown[] = [];
    const collector = createServer((req, res) => {
      let text = "";
      req.on("data", (d: Buffer) => {
        text += d.toString();
      });
      req.on("end", () => {
        if (req.url === "/v1/traces") bodies.push(JSON.parse(text));
        res.writeHead(200, { "content-type": "application/json" });
        res.end("{}");
      });
    });
    await new Promise<void>((r) => collector.listen(0, "127.0.0.1", () => r()));
    const fdb = await freshDb("otel");
    const provider = await startScriptedProvider({
      keys: [UPSTREAM_KEY],
      scenario: { text: "hi", usage: { input: 1000, output: 200, cacheRead: 50 } },
    });
    const tracer = startModelCallTracing({
      endpoint: `http://127.0.0.1:${(collector.address() as AddressInfo).port}`,
      serviceName: "evalfleet-gateway",
    });
    const gw = await startGateway({
      db: fdb.db,
      tracer,
      aliases: {
        "sonnet-o": {
          upstream: { provider: "anthropic", baseUrl: provider.url, apiKey: UPSTREAM_KEY },
          model: "claude-sonnet-4-5",
          runs: ["run-o"],
        },
      },
    });
    try {
      const key = await createRunKey(fdb.db, "run-o");
      await new Anthropic({ baseURL: gw.url, apiKey: key, maxRetries: 0 }).messages.create({
        model: "sonnet-o",
        max_tokens: 1000,
        messages: [{ role: "user", content: "hi" }],
      });
    } finally {
      await gw.close();
      await tracer.shutdown();
      await provider.close();
      await fdb.cleanup();
      await new Promise<void>((r) => collector.close(() => r()));
    }
    type Attr = { key: string; value: Record<string, unknown> };
    type OtlpSpan = { name: string; kind: number; attributes: Attr[] };
    const spans = (
      bodies as Array<{ resourceSpans: Array<{ scopeSpans: Array<{ spans: OtlpSpan[] }> }> }>
    ).flatMap((b) => b.resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans)));
    assert.equal(spans.length, 1);
    const span = spans[0]!;
    assert.equal(span.name, "chat claude-sonnet-4-5");
    assert.equal(span.kind, 3, "SPAN_KIND_CLIENT");
    const attr = Object.fromEntries(span.attributes.map((a) => [a.key, Object.values(a.value)[0]]));
    assert.equal(attr["gen_ai.operation.name"], "chat");
    assert.equal(attr["gen_ai.provider.name"], "anthropic");
    assert.equal(attr["gen_ai.request.model"], "claude-sonnet-4-5");
    assert.equal(Number(attr["gen_ai.usage.input_tokens"]), 1050, "cached input tokens included");
    assert.equal(attr["gen_ai.response.model"], "claude-sonnet-4-5");
    assert.equal(Number(attr["gen_ai.usage.output_tokens"]), 200);
    assert.equal(Number(attr["gen_ai.usage.cache_read.input_tokens"]), 50);
    assert.equal(attr["evalfleet.run"], "run-o");
  });
});
