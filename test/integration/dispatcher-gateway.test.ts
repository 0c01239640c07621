import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type Gateway, startGateway } from "../../gateway-sidecar/server.js";
import { StateKeys } from "../../protocol/subjects.js";
import { type ScriptedProvider, startScriptedProvider } from "../../scripts/scripted-provider/index.js";
import { budgetState, type DispatchRig, startRig, waitFor } from "./dispatcher-fixture.js";

/*
 * Sim attempts take the production path to the model: their shims forward to the gateway with the run's key, read
 * from the jobs bucket where the planner left it (no key configured anywhere), and only the gateway's own key
 * reaches the provider.
 */

const UPSTREAM_KEY = "sk-upstream-dispatch-gateway";
const MODEL = "claude-sonnet-4-5";
let rig: DispatchRig;
let provider: ScriptedProvider;
let gw: Gateway;

before(async () => {
  rig = await startRig([{ id: "t1" }, { id: "t2" }]);
  provider = await startScriptedProvider({
    keys: [UPSTREAM_KEY],
    scenario: { text: "ok", usage: { input: 1_000, output: 100 } },
  });
  gw = await startGateway({
    db: rig.store.db,
    aliases: {
      [MODEL]: { upstream: { provider: "anthropic", baseUrl: provider.url, apiKey: UPSTREAM_KEY } },
    },
  });
  await rig.dispatcher({ sim: { calls: 2, thinkMs: 200, upstream: { url: gw.url } } });
});

after(async () => {
  await rig.close();
  await gw.close();
  await provider.close();
});

describe("dispatcher sim backend through the gateway", () => {
  it("forwards every call with the run's key from the jobs bucket; the provider sees only the gateway's key", async () => {
    await rig.submit({
      name: "via-gw",
      harnesses: [{ name: "h", adapter: "sim" }],
      models: [{ name: MODEL }],
      tasks: ["*"],
      repeats: 2,
      parallel_runs: 4,
      budget_usd: 10,
    });
    const b = await waitFor("all released", async () => {
      const s = await budgetState(rig.client, "via-gw");
      return s && Object.keys(s.open).length === 0 && s.billableNano > 0 ? s : undefined;
    });
    const key = await rig.client.kv.jobs.get(StateKeys.runKey("via-gw"));
    assert.match(key?.string() ?? "", /^efk-/, "the planner's run key is in the jobs bucket");
    const calls = provider.calls();
    assert.equal(calls.length, 8, "4 cells × 2 calls");
    assert.ok(
      calls.every((c) => c.key === UPSTREAM_KEY),
      "only the gateway's key reaches the provider",
    );
    const rows = await rig.store.db.query<{ status: string; cell_id: string; cost_nano_usd: string }>(
      "SELECT status, cell_id, cost_nano_usd::text FROM gateway_spend_log WHERE run_name = $1",
      ["via-gw"],
    );
    assert.equal(rows.rows.length, 8, "each call in the gateway's spend log");
    assert.ok(rows.rows.every((r) => r.status === "ok" && r.cell_id.startsWith("h__")));
    const logged = rows.rows.reduce((s, r) => s + Number(r.cost_nano_usd), 0);
    assert.equal(logged, provider.bill().total.costNanoUsd, "the gateway's log equals the bill");
    assert.equal(b.billableNano, logged, "and the attempts' metered usage");
  });
});
