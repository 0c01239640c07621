/**
 * Every forwarded call settles: a call whose caller is cut off after the send (its task killed, its connection
 * lost) is still read to its end by the gateway, which meters what the provider billed; at the run's end the calls
 * no shim could meter settle from the gateway's spend log into the ledger (source 'gateway'), matched to the shim's
 * rows by call id so a call the shim metered is never counted twice. The ledger then equals the provider's bill.
 */
import assert from "node:assert/strict";
import { request } from "node:http";
import { after, before, test } from "node:test";
import { type Gateway, GatewayHeaders, startGateway } from "../../gateway/server.js";
import {
  type ScriptedProvider,
  type ScriptedRequest,
  startScriptedProvider,
} from "../../scripted-provider/index.js";
import { createAttemptKey } from "../../store/keys.js";
import { settleFromGateway } from "../../store/reconcile.js";
import { insertLedgerCalls, saveRunMetadata } from "../../store/results.js";
import { type FreshDb, freshDb } from "../helpers/db.js";

const UPSTREAM_KEY = "sk-upstream-settle";
const RUN = "settle";
const CELL = "h__sonnet-a__t__r0";
let fdb: FreshDb;
let provider: ScriptedProvider;
let gw: Gateway;
let key: string;
/** Resolved when the provider holds the call with this id (it answers after its delay). */
const received = new Map<string, () => void>();

before(async () => {
  fdb = await freshDb("gateway_settle");
  provider = await startScriptedProvider({
    keys: [UPSTREAM_KEY],
    scenario: (req: ScriptedRequest) => {
      received.get(callOf(req.body))?.();
      return { text: "a reply of some length", usage: { input: 2000, output: 500 }, firstByteDelayMs: 300 };
    },
  });
  gw = await startGateway({
    db: fdb.db,
    aliases: {
      "sonnet-a": {
        upstream: { provider: "anthropic", baseUrl: provider.url, apiKey: UPSTREAM_KEY },
        model: "claude-sonnet-4-5",
      },
    },
  });
  await saveRunMetadata(fdb.db, { runName: RUN, config: { name: RUN }, version: "test" });
  key = await createAttemptKey(fdb.db, {
    run: RUN,
    cellId: CELL,
    attempt: 1,
    models: ["sonnet-a"],
    capNanoUsd: null,
    exempt: false,
  });
});
after(async () => {
  await gw.close();
  await provider.close();
  await fdb.cleanup();
});

/** The call id goes upstream in the prompt (the gateway strips its own headers), so the provider can tell calls apart. */
const bodyOf = (callId: string) =>
  JSON.stringify({ model: "sonnet-a", max_tokens: 1000, messages: [{ role: "user", content: callId }] });
const callOf = (body: unknown): string =>
  String((body as { messages?: Array<{ content?: unknown }> }).messages?.[0]?.content ?? "");

/**
 * One call with the shim's call id. `cut`: the caller's connection is destroyed once the provider holds the call
 * (after the send, before any answer), as when its task is SIGKILLed mid-call.
 */
function call(callId: string, cut: boolean): Promise<number | "cut"> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${gw.url}/v1/messages`,
      {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "x-api-key": key,
          "anthropic-version": "2023-06-01",
          [GatewayHeaders.call]: callId,
        },
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      },
    );
    req.on("error", (err) => (cut ? resolve("cut") : reject(err)));
    if (cut)
      received.set(callId, () => {
        received.delete(callId);
        req.destroy();
      });
    req.end(bodyOf(callId));
  });
}

/** The gateway's row of a call once it is no longer pending (the gateway settles it when the provider answers). */
async function settledRow(callId: string): Promise<{ status: string; cost: number }> {
  for (let i = 0; i < 300; i++) {
    const r = await fdb.db.query<{ status: string; cost: string }>(
      "SELECT status, cost_nano_usd::text AS cost FROM gateway_spend_log WHERE call_id = $1",
      [callId],
    );
    const row = r.rows[0];
    if (row && row.status !== "pending") return { status: row.status, cost: Number(row.cost) };
    await new Promise((res) => setTimeout(res, 50));
  }
  throw new Error(`the gateway never settled call ${callId}: its row is still pending or missing`);
}

const billedFor = (callId: string): number =>
  provider
    .calls()
    .filter((c) => callOf(c.body) === callId)
    .reduce((a, c) => a + c.costNanoUsd, 0);

async function ledger(): Promise<
  Map<string, { source: string; status: string; cost: number; attempt: number }>
> {
  const r = await fdb.db.query<{
    call_id: string;
    source: string;
    status: string;
    cost: string;
    attempt: number;
  }>(
    "SELECT call_id, source, status, cost_nano_usd::text AS cost, attempt FROM ledger_calls WHERE run_name = $1",
    [RUN],
  );
  return new Map(
    r.rows.map((x) => [
      x.call_id,
      { source: x.source, status: x.status, cost: Number(x.cost), attempt: Number(x.attempt) },
    ]),
  );
}

test("calls cut off after the send settle from the gateway's spend log; the ledger equals the bill", async () => {
  // 1. metered by the shim: its ledger row is the shim's, with the cost it metered.
  assert.equal(await call("call-metered", false), 200);
  // 2. its task killed mid-call: no ledger row at all.
  assert.equal(await call("call-killed", true), "cut");
  // 3. its connection lost after the send: the shim wrote a row that saw no answer (error, no HTTP status, cost 0).
  assert.equal(await call("call-lost", true), "cut");
  for (const id of ["call-metered", "call-killed", "call-lost"]) {
    const row = await settledRow(id);
    // The gateway read each call to its end, whoever left: its figure is what the provider billed.
    assert.equal(
      row.cost,
      billedFor(id),
      `${id}: gateway ${row.status} ${row.cost} vs billed ${billedFor(id)}`,
    );
    assert.ok(row.cost > 0, `${id} was billed`);
  }
  const shimRow = (callId: string, costNanoUsd: number, status: string, httpStatus: number | null) => ({
    callId,
    runName: RUN,
    cellId: CELL,
    attempt: 1,
    traceId: CELL,
    model: "claude-sonnet-4-5",
    alias: "sonnet-a",
    status,
    httpStatus,
    costNanoUsd,
  });
  await insertLedgerCalls(fdb.db, [
    shimRow("call-metered", billedFor("call-metered"), "ok", 200),
    shimRow("call-lost", 0, "error", null),
  ]);

  assert.equal(await settleFromGateway(fdb.db, RUN), 2, "one call added, one shim row completed");
  const l = await ledger();
  assert.deepEqual([...l.entries()].map(([id, x]) => [id, x.source, x.attempt]).sort(), [
    ["call-killed", "gateway", 1],
    ["call-lost", "gateway", 1],
    ["call-metered", "shim", 1],
  ]);
  const total = [...l.values()].reduce((a, x) => a + x.cost, 0);
  const bill = provider.bill().byKey[UPSTREAM_KEY]?.costNanoUsd ?? -1;
  assert.equal(total, bill, "the ledger equals the provider's bill exactly");

  // Settling again changes nothing: nothing is counted twice.
  assert.equal(await settleFromGateway(fdb.db, RUN), 0);
  const again = [...(await ledger()).values()].reduce((a, x) => a + x.cost, 0);
  assert.equal(again, bill);
});
