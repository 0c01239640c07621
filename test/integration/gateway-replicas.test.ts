import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Agent, request } from "undici";
import { createRunKey } from "../../gateway-sidecar/keys.js";
import { type Gateway, GatewayHeaders, startGateway } from "../../gateway-sidecar/server.js";
import { AnthropicStreamMeter, anthropicJsonResult } from "../../providers/anthropic.js";
import { PriceTable } from "../../providers/pricing.js";
import { SseParser } from "../../providers/sse.js";
import type { TokenUsage } from "../../providers/types.js";
import { type ScriptedProvider, startScriptedProvider } from "../../scripts/scripted-provider/index.js";
import { type FreshDb, freshDb } from "../helpers/db.js";

/*
 * Two gateway replicas share one database; a client that behaves like the shim (retry another replica when one
 * does not answer) makes 60 calls, and one replica is taken away mid-run. Drained (SIGTERM, as ECS stops a task):
 * the spend log equals the upstream's bill and the ledger exactly. Cut dead (SIGKILL-like): no call is lost, the
 * answered calls equal the ledger, and each call that died with the replica is in the log as `lost` at its
 * worst-case reservation — the log over-counts, never under-counts, and reconciliation flags it.
 */

const UPSTREAM_KEY = "sk-upstream-replicas";
const MODEL = "claude-sonnet-4-5";
const prices = new PriceTable();
let fdb: FreshDb;

before(async () => {
  fdb = await freshDb("gateway_replicas");
});
after(async () => {
  await fdb.cleanup();
});

async function setup(): Promise<{ provider: ScriptedProvider; a: Gateway; b: Gateway }> {
  const provider = await startScriptedProvider({
    keys: [UPSTREAM_KEY],
    // Output varies per call so the sums are not a multiple of one figure.
    scenario: (req) => ({
      text: "x".repeat(40 + (req.index % 17) * 4),
      firstByteDelayMs: 60,
      deltaDelayMs: 2,
    }),
  });
  const aliases = {
    sonnet: {
      upstream: { provider: "anthropic" as const, baseUrl: provider.url, apiKey: UPSTREAM_KEY },
      model: MODEL,
    },
  };
  const a = await startGateway({ db: fdb.db, aliases });
  const b = await startGateway({ db: fdb.db, aliases });
  return { provider, a, b };
}

interface Ledger {
  calls: number;
  costNanoUsd: number;
  retries: number;
}

/** One call as the shim makes it: on a dead replica (connection error or 502) try the next one. */
async function call(
  urls: string[],
  start: number,
  key: string,
  i: number,
  agent: Agent,
  ledger: Ledger,
): Promise<void> {
  const stream = i % 3 === 0;
  const body = JSON.stringify({
    model: "sonnet",
    max_tokens: 200,
    stream,
    messages: [{ role: "user", content: `call ${i}` }],
  });
  for (let attempt = 0; attempt < 6; attempt++) {
    const url = urls[(start + attempt) % urls.length]!;
    try {
      const res = await request(`${url}/v1/messages`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "x-api-key": key,
          [GatewayHeaders.cell]: `cell-${i % 4}`,
        },
        body,
        dispatcher: agent,
      });
      if (res.statusCode === 502) {
        await res.body.dump();
        ledger.retries++;
        continue;
      }
      assert.equal(res.statusCode, 200);
      let usage: TokenUsage;
      if (stream) {
        const meter = new AnthropicStreamMeter();
        const parser = new SseParser((ev) => meter.onEvent(ev));
        for await (const chunk of res.body) parser.push(chunk as Buffer);
        const r = meter.result();
        if (!r.complete) throw new Error("stream cut");
        usage = r.usage;
      } else {
        usage = anthropicJsonResult(await res.body.text()).usage;
      }
      ledger.calls++;
      ledger.costNanoUsd += prices.cost(MODEL, usage).costNanoUsd;
      return;
    } catch {
      ledger.retries++;
    }
  }
  throw new Error(`call ${i} lost`);
}

async function runLoad(
  g: { a: Gateway; b: Gateway },
  key: string,
  stopA: () => Promise<void>,
): Promise<Ledger> {
  const agent = new Agent({ connections: 16 });
  const ledger: Ledger = { calls: 0, costNanoUsd: 0, retries: 0 };
  const urls = [g.a.url, g.b.url];
  let next = 0;
  let stopping: Promise<void> | undefined;
  await Promise.all(
    Array.from({ length: 10 }, async () => {
      while (next < 60) {
        const i = next++;
        if (i === 25) stopping = stopA();
        await call(urls, i, key, i, agent, ledger);
      }
    }),
  );
  await stopping;
  await agent.close();
  return ledger;
}

async function spendRows(run: string) {
  return (
    await fdb.db.query<{ status: string; cost_nano_usd: number }>(
      "SELECT status, cost_nano_usd FROM gateway_spend_log WHERE run_name = $1",
      [run],
    )
  ).rows.map((r) => ({ status: r.status, cost: Number(r.cost_nano_usd) }));
}

test("one replica drained mid-run: no call lost, spend log = upstream bill = ledger", async () => {
  const g = await setup();
  const run = "replicas-drain";
  const key = await createRunKey(fdb.db, run);
  const ledger = await runLoad(g, key, () => g.a.close());
  assert.equal(ledger.calls, 60, "every call answered");
  const rows = await spendRows(run);
  const bill = g.provider.bill().total;
  assert.equal(rows.length, bill.calls);
  assert.ok(rows.every((r) => r.status === "ok"));
  const logged = rows.reduce((s, r) => s + r.cost, 0);
  assert.equal(logged, bill.costNanoUsd, "gateway spend log equals the upstream's bill");
  assert.equal(logged, ledger.costNanoUsd, "and the ledger");
  await g.b.close();
  await g.provider.close();
});

test("one replica cut dead mid-run: no call lost; answered calls = ledger; the dead calls are logged, over not under", async () => {
  const g = await setup();
  const run = "replicas-crash";
  const key = await createRunKey(fdb.db, run);
  const ledger = await runLoad(g, key, () => g.a.close({ abort: true }));
  assert.equal(ledger.calls, 60, "every call answered");
  assert.ok(ledger.retries > 0, "some calls were in flight on the replica that died");
  const rows = await spendRows(run);
  const ok = rows.filter((r) => r.status === "ok");
  const dead = rows.filter((r) => r.status !== "ok");
  assert.equal(ok.length, 60);
  assert.equal(
    ok.reduce((s, r) => s + r.cost, 0),
    ledger.costNanoUsd,
    "answered calls in the spend log equal the ledger",
  );
  const bill = g.provider.bill().total;
  const logged = rows.reduce((s, r) => s + r.cost, 0);
  // The upstream billed the calls that died with the replica; the log holds each of them at its reservation.
  assert.ok(dead.length > 0, "the calls in flight on the dead replica are in the log");
  assert.ok(
    dead.length >= bill.calls - 60,
    `dead calls logged: ${dead.length}, billed beyond the 60: ${bill.calls - 60}`,
  );
  assert.ok(logged >= bill.costNanoUsd, `log ${logged} >= bill ${bill.costNanoUsd}`);
  await g.b.close();
  await g.provider.close();
});
