import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { NatsConnection } from "@nats-io/transport-node";
import { buildMatrix } from "../../actors/planner/matrix.js";
import { openGatewayPacer } from "../../gateway/pacer.js";
import { runAliasResolver } from "../../gateway/run-aliases.js";
import { type Gateway, startGateway } from "../../gateway/server.js";
import { silentLogger } from "../../lib/log.js";
import type { FleetPacer } from "../../pacer/fleet-pacer.js";
import { RunConfigSchema, TaskSpecSchema } from "../../protocol/config.js";
import { GatewayAnswerHeaders } from "../../protocol/headers.js";
import { type ScriptedProvider, startScriptedProvider } from "../../scripted-provider/index.js";
import { createRunKey } from "../../store/keys.js";
import { saveRunMetadata } from "../../store/results.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { startNats, type TestNats } from "../helpers/nats.js";

/*
 * Pacing at the gateway, as `up` and the deployed replicas run it: every forwarded call is admitted by its model's
 * pool in the fleet pacer (one owner across replicas), whose limits come from the provider's own rate-limit headers;
 * the pool is named as the planner names it, so the limits the gateway learns size the fleet.
 */

const UPSTREAM_KEY = "sk-upstream-pacing";
const RUN = "paced-run";
/** The provider's limit: 600 requests per minute, told in its headers on every answer. */
const RPM = 600;
const runConfig = RunConfigSchema.parse({
  name: RUN,
  harnesses: [
    { name: "claude-code", adapter: "claude-code" },
    { name: "codex-like", adapter: "command" },
  ],
  models: [{ name: "sonnet", alias: "claude-sonnet-4-5", provider: "anthropic" }],
  tasks: ["*"],
});

let fdb: FreshDb;
let nats: TestNats;
let provider: ScriptedProvider;
const ncs: NatsConnection[] = [];
const pacers: FleetPacer[] = [];
const gateways: Gateway[] = [];

before(async () => {
  fdb = await freshDb("gateway_pacing");
  nats = await startNats();
  provider = await startScriptedProvider({
    keys: [UPSTREAM_KEY],
    limits: { rpm: RPM, inputTpm: 100_000_000, outputTpm: 10_000_000 },
    scenario: { text: "paced", usage: { input: 50, output: 5 } },
  });
  await saveRunMetadata(fdb.db, { runName: RUN, config: runConfig, version: "test" });
  const upstreams = {
    anthropic: { provider: "anthropic" as const, baseUrl: provider.url, apiKey: UPSTREAM_KEY },
  };
  // Two replicas, each with its own NATS connection and pacer, sharing one database.
  for (const name of ["a", "b"]) {
    const nc = await nats.connect(`gateway-${name}`);
    ncs.push(nc);
    const pacer = await openGatewayPacer(nc, {}, silentLogger());
    pacers.push(pacer);
    gateways.push(
      await startGateway({ db: fdb.db, pacer, resolveAlias: runAliasResolver(fdb.db, upstreams) }),
    );
  }
});

after(async () => {
  for (const g of gateways) await g.close({ abort: true });
  for (const p of pacers) await p.close();
  for (const nc of ncs) await nc.close().catch(() => {});
  await provider.close();
  await nats.cleanup();
  await fdb.cleanup();
});

async function call(gw: Gateway, key: string): Promise<{ status: number; waitMs: number }> {
  const res = await fetch(`${gw.url}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": key, "anthropic-version": "2023-06-01" },
    body: JSON.stringify({
      model: "claude-sonnet-4-5",
      max_tokens: 64,
      messages: [{ role: "user", content: "hi" }],
    }),
  });
  await res.arrayBuffer();
  return { status: res.status, waitMs: Number(res.headers.get(GatewayAnswerHeaders.pacerWaitMs) ?? -1) };
}

test("the gateway paces in the pool the planner sizes: one per model, shared by every harness", async () => {
  const task = TaskSpecSchema.parse({ id: "t1" });
  const pools = new Set(buildMatrix(runConfig, [task]).map((c) => c.pool));
  assert.deepEqual([...pools], ["claude-sonnet-4-5"], "both harnesses' cells draw on the model's one pool");
  const def = await runAliasResolver(fdb.db, {
    anthropic: { provider: "anthropic", baseUrl: provider.url, apiKey: UPSTREAM_KEY },
  })("claude-sonnet-4-5");
  assert.equal(def?.pool, "claude-sonnet-4-5", "the gateway's pool for the run's model is the planner's");
});

test("two replicas hold the provider's discovered limit together: calls wait at the gateway, none is refused", async () => {
  const key = await createRunKey(fdb.db, RUN);
  // One call teaches the pool its limit (the provider's headers); until then the pool has none.
  assert.equal((await call(gateways[0]!, key)).status, 200);
  const record = await waitForLimit(pacers[0]!, "claude-sonnet-4-5");
  assert.equal(record, RPM, "the pool's record holds the limit the provider's headers gave");
  const n = 60;
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: n }, (_, i) => call(gateways[i % 2]!, key)));
  const seconds = (performance.now() - t0) / 1000;
  assert.deepEqual(
    results.filter((r) => r.status !== 200),
    [],
    "every call is answered, none refused by the pacer or the provider",
  );
  assert.equal(
    provider.calls().filter((c) => c.outcome === "rate_limited").length,
    0,
    "no 429 reached anyone",
  );
  // 10 calls a second with a one-second burst: 60 calls take at least ~5 s; unpaced they take well under one.
  const floor = (n - RPM / 60) / (RPM / 60);
  assert.ok(seconds >= floor * 0.85, `60 calls took ${seconds.toFixed(2)} s; paced they take ≥ ${floor} s`);
  assert.ok(
    results.some((r) => r.waitMs > 1000),
    "the answers say how long the gateway held them (the shim's ledger counts it as pacer wait)",
  );
  const owners = pacers.map((p) => p.ownedPools().includes("claude-sonnet-4-5"));
  assert.equal(owners.filter(Boolean).length, 1, "exactly one replica owns the pool");
});

test("with NATS gone, a call is forwarded unpaced after the gateway's bound instead of waiting for ever", async () => {
  const key = await createRunKey(fdb.db, RUN);
  await nats.nodes[0]!.stop("SIGKILL");
  const t0 = performance.now();
  const r = await call(gateways[1]!, key);
  const seconds = (performance.now() - t0) / 1000;
  assert.equal(r.status, 200);
  assert.ok(seconds < 8, `answered in ${seconds.toFixed(1)} s`);
});

async function waitForLimit(pacer: FleetPacer, pool: string): Promise<number | undefined> {
  const until = Date.now() + 5000;
  for (;;) {
    const rec = await pacer.poolRecord(pool);
    const rpm = rec?.checkpoint.limits.requestsPerMinute;
    if (rpm !== undefined || Date.now() > until) return rpm;
    await new Promise((r) => setTimeout(r, 100));
  }
}
