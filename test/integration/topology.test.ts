import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstreamManager, RetentionPolicy } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { EvalfleetError } from "../../protocol/errors.js";
import { Buckets, Consumers, ensureTopology, openBucket, Streams } from "../../protocol/topology.js";
import { startNats, startNatsCluster, type TestNats } from "../helpers/nats.js";

describe("ensureTopology", () => {
  let nats: TestNats;
  before(async () => {
    nats = await startNats();
  });
  after(async () => {
    await nats.cleanup();
  });

  it("creates everything, idempotently, and survives a restart with the store kept", async () => {
    const nc = await nats.connect();
    const jsm = await jetstreamManager(nc);
    await ensureTopology(nc, jsm);
    await ensureTopology(nc, jsm);
    for (const s of Object.values(Streams)) {
      const info = await jsm.streams.info(s.name);
      assert.equal(info.config.retention, s.retention);
      assert.equal(info.config.duplicate_window, s.duplicateWindowNs);
    }
    for (const c of Object.values(Consumers))
      assert.equal((await jsm.consumers.info(c.stream, c.durable)).config.durable_name, c.durable);
    const status = await (await new Kvm(nc).open(Buckets.progress.name)).status();
    assert.equal(status.ttl, Buckets.progress.maxAgeMs, "progress expiry is bucket-level max_age");
    await nats.restart();
    const nc2 = await nats.connect("after-restart");
    await ensureTopology(nc2, await jetstreamManager(nc2));
    assert.equal(
      (await (await jetstreamManager(nc2)).streams.info(Streams.cells.name)).config.name,
      Streams.cells.name,
    );
  });

  it("lets many processes create the same topology at once (none fails on a concurrent creator)", async () => {
    // Tasks, replicas and pacer clients all start by ensuring topology; on a fresh server they race to create it.
    for (let round = 0; round < 5; round++) {
      const fresh = await startNats();
      try {
        const conns = await Promise.all(Array.from({ length: 6 }, (_, i) => fresh.connect(`racer-${i}`)));
        await Promise.all(conns.map(async (nc) => ensureTopology(nc, await jetstreamManager(nc))));
        const pacers = await Promise.all(conns.map((nc) => openBucket(nc, Buckets.pacer)));
        assert.equal(pacers.length, conns.length);
        const jsm = await jetstreamManager(conns[0]!);
        for (const s of Object.values(Streams))
          assert.equal((await jsm.streams.info(s.name)).config.name, s.name);
      } finally {
        await fresh.cleanup();
      }
    }
  });

  it("refuses a stream or bucket made with other settings, naming the setting", async () => {
    const other = await startNats();
    try {
      const nc = await other.connect();
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({
        name: Streams.cells.name,
        subjects: ["cells.>"],
        retention: RetentionPolicy.Limits,
      });
      await assert.rejects(
        ensureTopology(nc, jsm),
        (e: unknown) => e instanceof EvalfleetError && /retention/.test(e.message),
      );
      await jsm.streams.delete(Streams.cells.name);
      await new Kvm(nc).create(Buckets.progress.name, { history: 5 });
      await assert.rejects(
        ensureTopology(nc, jsm),
        (e: unknown) => e instanceof EvalfleetError && /history=5/.test(e.message),
      );
    } finally {
      await other.cleanup();
    }
  });
});

describe("three-node cluster helper", () => {
  it("serves JetStream with replicated streams and survives a node kill", async () => {
    const cluster = await startNatsCluster(3);
    try {
      const nc = await cluster.connect();
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: "REPL", subjects: ["repl.>"], num_replicas: 3 });
      const { jetstream } = await import("@nats-io/jetstream");
      const js = jetstream(nc);
      await js.publish("repl.a", "1");
      await cluster.nodes[2]!.stop("SIGKILL");
      const deadline = Date.now() + 20_000;
      for (;;) {
        try {
          await js.publish("repl.b", "2", { timeout: 2_000 });
          break;
        } catch (err) {
          if (Date.now() > deadline) throw err;
          await new Promise((r) => setTimeout(r, 250));
        }
      }
      assert.equal((await jsm.streams.info("REPL")).state.messages, 2);
    } finally {
      await cluster.cleanup();
    }
  });
});
