import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Agent, request } from "undici";
import { type Gateway, GatewayHeaders, startGateway } from "../../gateway/server.js";
import { AnthropicStreamMeter, anthropicJsonResult } from "../../providers/anthropic.js";
import { PriceTable } from "../../providers/pricing.js";
import { SseParser } from "../../providers/sse.js";
import type { TokenUsage } from "../../providers/types.js";
import { type ScriptedProvider, startScriptedProvider } from "../../scripted-provider/index.js";
import type { Db } from "../../store/db.js";
import { createRunKey } from "../../store/keys.js";
import { reconcileAttempt } from "../../store/spend.js";
import { type FreshDb, freshDb } from "../helpers/db.js";

/*
 * Two gateway replicas share one database; a client that behaves like the shim (retry another replica when one
 * does not answer) makes 60 calls, and one replica is taken away mid-run. Drained (SIGTERM, as ECS stops a task):
 * the spend log equals the upstream's bill and the ledger exactly. Cut dead (SIGKILL-like): no call is lost, each
 * call that died with the replica is in the log at its worst-case reservation — the log over-counts, never
 * under-counts — and reconciliation flags the cells it touched.
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
  byCell: Map<string, number>;
}

const cellOf = (i: number) => `cell-${i % 4}`;

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
      if (res.statusCode !== 200) {
        // 502: the gateway lost its upstream call (its replica is going away); anything else is a failure.
        const text = await res.body.text();
        if (res.statusCode !== 502) throw new Error(`call ${i}: ${res.statusCode} ${text}`);
        ledger.retries++;
        continue;
      }
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
      const costNanoUsd = prices.cost(MODEL, usage).costNanoUsd;
      ledger.calls++;
      ledger.costNanoUsd += costNanoUsd;
      ledger.byCell.set(cellOf(i), (ledger.byCell.get(cellOf(i)) ?? 0) + costNanoUsd);
      return;
    } catch (err) {
      if (/^call \d+: /.test((err as Error).message)) throw err;
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
  const ledger: Ledger = { calls: 0, costNanoUsd: 0, retries: 0, byCell: new Map() };
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
  await agent.destroy(); // a connection the dead replica left half-open must not hold the test
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
  assert.deepEqual(
    rows.filter((r) => r.status !== "ok"),
    [],
    "a drained replica finishes and logs every call it took",
  );
  const logged = rows.reduce((s, r) => s + r.cost, 0);
  assert.equal(logged, bill.costNanoUsd, "gateway spend log equals the upstream's bill");
  assert.equal(logged, ledger.costNanoUsd, "and the ledger");
  await g.b.close();
  await g.provider.close();
});

test("one replica cut dead mid-run: no call lost; every billed call is in the log, never under-counted; reconciliation flags the gap", async () => {
  const g = await setup();
  const run = "replicas-crash";
  const key = await createRunKey(fdb.db, run);
  const ledger = await runLoad(g, key, () => g.a.close({ abort: true }));
  assert.equal(ledger.calls, 60, "every call answered");
  assert.ok(ledger.retries > 0, "some calls were in flight on the replica that died");
  const rows = await spendRows(run);
  const dead = rows.filter((r) => r.status !== "ok");
  assert.ok(dead.length > 0, "the calls in flight on the dead replica are in the log");
  const bill = g.provider.bill().total;
  // Each upstream call has its row: exact when answered, its worst-case reservation when it died with the replica.
  assert.ok(rows.length >= bill.calls, `rows ${rows.length} >= calls billed ${bill.calls}`);
  const logged = rows.reduce((s, r) => s + r.cost, 0);
  assert.ok(
    logged >= bill.costNanoUsd,
    `log ${logged} >= bill ${bill.costNanoUsd}: over-counted, never under`,
  );
  assert.ok(
    bill.costNanoUsd >= ledger.costNanoUsd,
    "the upstream billed at least what the agents were answered",
  );
  // Per cell: the gateway never shows less than the ledger, and any difference is flagged.
  let flaggedCells = 0;
  for (const [cell, ledgerNanoUsd] of ledger.byCell) {
    const rec = await reconcileAttempt(fdb.db, run, cell, ledgerNanoUsd);
    assert.ok(rec.differenceNanoUsd >= 0, `${cell}: gateway ${rec.gatewayNanoUsd} < ledger ${ledgerNanoUsd}`);
    assert.equal(rec.flagged, rec.differenceNanoUsd !== 0 || rec.pendingCalls > 0);
    if (rec.flagged) flaggedCells++;
  }
  assert.ok(flaggedCells > 0, "the cells whose calls died with the replica are flagged");
  await g.b.close();
  await g.provider.close();
});

test("a caller that leaves while its reservation is written: the call is never forwarded, its row settles at 0", async () => {
  const provider = await startScriptedProvider({ keys: [UPSTREAM_KEY] });
  const caller = new AbortController();
  // The caller gives up while the reservation is being inserted, which takes a while.
  const slowDb: Db = {
    kind: fdb.db.kind,
    close: () => fdb.db.close(),
    transaction: (fn) => fdb.db.transaction(fn),
    async query(sql, params) {
      if (sql.includes("INSERT INTO gateway_spend_log")) {
        caller.abort();
        await new Promise((r) => setTimeout(r, 300));
      }
      return fdb.db.query(sql, params);
    },
  };
  const gw = await startGateway({
    db: slowDb,
    runCapNanoUsd: async () => undefined,
    aliases: {
      sonnet: {
        upstream: { provider: "anthropic", baseUrl: provider.url, apiKey: UPSTREAM_KEY },
        model: MODEL,
      },
    },
  });
  try {
    const run = "replicas-caller-gone";
    const key = await createRunKey(fdb.db, run);
    await assert.rejects(
      request(`${gw.url}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": key, [GatewayHeaders.cell]: "cell-0" },
        body: JSON.stringify({
          model: "sonnet",
          max_tokens: 100,
          messages: [{ role: "user", content: "hi" }],
        }),
        signal: caller.signal,
      }),
    );
    let rows: Array<{ status: string; cost: number }> = [];
    for (let i = 0; i < 100 && !rows.some((r) => r.status !== "pending"); i++) {
      await new Promise((r) => setTimeout(r, 50));
      rows = await spendRows(run);
    }
    assert.deepEqual(rows, [{ status: "client_closed", cost: 0 }], "settled, at no cost");
    assert.equal(provider.calls().length, 0, "nothing reached the provider");
  } finally {
    await gw.close();
    await provider.close();
  }
});
