import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type Gateway, startGateway } from "../../gateway/server.js";
import { purgeAttemptKeys } from "../../plane/prune.js";
import { StateKeys } from "../../protocol/subjects.js";
import { type ScriptedProvider, startScriptedProvider } from "../../scripted-provider/index.js";
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
  it("forwards every call with its attempt's own key from the jobs bucket; the provider sees only the gateway's key", async () => {
    await rig.submit({
      name: "via-gw",
      harnesses: [{ name: "h", adapter: "sim" }],
      models: [{ name: MODEL }],
      tasks: ["*"],
      repeats: 2,
      parallel_runs: 4,
      budget_usd: 10,
      max_cost_usd: 0.5,
    });
    const b = await waitFor("all released", async () => {
      const s = await budgetState(rig.client, "via-gw");
      return s && Object.keys(s.open).length === 0 && s.billableNano > 0 ? s : undefined;
    });
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
    // Each attempt called with its own key, minted at launch: bound to its cell, capped at max_cost_usd, revoked
    // when it ended, and gone from the jobs bucket.
    const keys = await rig.store.db.query<{
      kind: string;
      cell_id: string;
      attempt: number;
      models: string;
      cap_nano_usd: string;
      revoked: boolean;
      calls: string;
    }>(
      `SELECT k.kind, k.cell_id, k.attempt, k.models, k.cap_nano_usd::text, k.revoked_at IS NOT NULL AS revoked,
              (SELECT count(*) FROM gateway_spend_log g WHERE g.key_hash = k.key_hash AND g.cell_id = k.cell_id)::text AS calls
         FROM virtual_keys k WHERE k.run_name = $1 AND k.kind = 'attempt' ORDER BY k.cell_id`,
      ["via-gw"],
    );
    assert.equal(keys.rows.length, 4, "one key per attempt");
    for (const k of keys.rows) {
      assert.deepEqual(JSON.parse(k.models), [MODEL]);
      assert.equal(k.cap_nano_usd, "500000000");
      assert.equal(k.revoked, true, `${k.cell_id}'s key revoked when its attempt ended`);
      assert.equal(k.calls, "2", `${k.cell_id}'s two calls were made with its own key`);
      // Its copy stays in the jobs bucket until the run's end purges the run's keys (the results-writer, not in this
      // rig): worthless, the gateway refuses it.
      const left = (
        await rig.client.kv.jobs.get(StateKeys.attemptKey("via-gw", k.cell_id, k.attempt))
      )?.string();
      assert.match(left ?? "", /^efk-/);
      const res = await fetch(`${gw.url}/v1/messages`, {
        method: "POST",
        headers: {
          "x-api-key": left ?? "",
          "anthropic-version": "2023-06-01",
          "content-type": "application/json",
        },
        body: JSON.stringify({ model: MODEL, max_tokens: 10, messages: [{ role: "user", content: "hi" }] }),
      });
      assert.equal(res.status, 401, `${k.cell_id}'s revoked key is refused`);
      await res.body?.cancel();
    }
    assert.equal(provider.calls().length, 8, "and nothing more reached the provider");
    assert.equal(await purgeAttemptKeys(rig.client.jsm, "via-gw"), 4, "the run's end purges them at once");
    for (const k of keys.rows)
      assert.equal(await rig.client.kv.jobs.get(StateKeys.attemptKey("via-gw", k.cell_id, k.attempt)), null);
  });
});
