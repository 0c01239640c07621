import assert from "node:assert/strict";
import { test } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import { startShim } from "../../shim/index.js";
import { RUN_KEY, readLedger, startRig, sum } from "./shim-fixture.js";

test("ledger rows survive a nats-server restart mid-session: every row lands exactly once", {
  timeout: 100_000,
}, async () => {
  const rig = await startRig({ run: "restart" });
  try {
    rig.provider.setScenario({ text: "ok", usage: { input: 10, output: 2 } });
    const client = new Anthropic({ baseURL: rig.shim.url, apiKey: "dummy", maxRetries: 0 });
    const ask = () =>
      client.messages.create({
        model: "claude-haiku-4-5",
        max_tokens: 10,
        messages: [{ role: "user", content: "x" }],
      });
    await Promise.all(Array.from({ length: 50 }, ask));
    // Calls go on while the server is away: they all complete before it comes back (the harness never waits on
    // the ledger), and their rows land once it is back.
    const node = rig.nats.nodes[0]!;
    await node.stop("SIGKILL");
    await Promise.all(Array.from({ length: 50 }, ask));
    assert.equal(node.running, false, "the 50 calls completed with NATS down");
    await node.start();
    await Promise.all(Array.from({ length: 50 }, ask));
    await rig.shim.drain();
    const rows = await readLedger(rig.nc, "restart");
    assert.equal(rows.length, 150);
    assert.equal(new Set(rows.map((r) => r.callId)).size, 150);
    assert.equal(
      sum(rows, (r) => r.costNanoUsd),
      rig.provider.bill().total.costNanoUsd,
    );
  } finally {
    await rig.close();
  }
});

test("shims that share one connection leave no subscription behind when they close", {
  timeout: 60_000,
}, async () => {
  const rig = await startRig({ run: "shared" });
  try {
    rig.provider.setScenario({ text: "ok", usage: { input: 10, output: 2 } });
    // The sim backend runs thousands of shims on one NATS connection; each must release what it took.
    const subs = () =>
      (
        rig.nc as unknown as { protocol: { subscriptions: { size(): number } } }
      ).protocol.subscriptions.size();
    const before = subs();
    for (let i = 0; i < 20; i++) {
      const shim = await startShim({
        upstream: rig.provider.url,
        run: "shared",
        cell: `cell-${i}`,
        attempt: 1,
        providerKey: RUN_KEY,
        nc: rig.nc,
      });
      const client = new Anthropic({ baseURL: shim.url, apiKey: "dummy", maxRetries: 0 });
      await client.messages.create({
        model: "claude-haiku-4-5",
        max_tokens: 10,
        messages: [{ role: "user", content: "x" }],
      });
      await shim.close();
    }
    assert.equal(subs(), before);
    const rows = await readLedger(rig.nc, "shared");
    assert.equal(rows.length, 20);
  } finally {
    await rig.close();
  }
});
