import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  DiscardPolicy,
  JetStreamApiError,
  type JetStreamManager,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
} from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { ensureTopology, openBucket } from "../../plane/topology.js";
import { EvalfleetError } from "../../protocol/errors.js";
import { Subjects } from "../../protocol/subjects.js";
import { Buckets, Consumers, Streams } from "../../protocol/topology.js";
import { startNats, startNatsCluster, type TestNats } from "../helpers/nats.js";
import { forSuite } from "../helpers/suite.js";

/** A server (or cluster) of the test's own, with a connection and a JetStream manager on it; stopped after `fn`. */
async function onOwnNats(
  start: () => Promise<TestNats>,
  fn: (nc: NatsConnection, jsm: JetStreamManager, nats: TestNats) => Promise<void>,
): Promise<void> {
  const own = await start();
  try {
    const nc = await own.connect();
    await fn(nc, await jetstreamManager(nc), own);
  } finally {
    await own.cleanup();
  }
}

describe("ensureTopology", () => {
  const nats = forSuite(
    () => startNats(),
    (n) => n.cleanup(),
  );

  it("creates everything, idempotently, and survives a restart with the store kept", async () => {
    const nc = await nats().connect();
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
    await nats().restart();
    const nc2 = await nats().connect("after-restart");
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

  it("a stream at its size cap refuses new messages and keeps every old one", async () => {
    await onOwnNats(startNats, async (nc, jsm) => {
      await ensureTopology(nc, jsm, { streamMaxBytes: 64 * 1024 });
      assert.equal((await jsm.streams.info(Streams.events.name)).config.max_bytes, 64 * 1024);
      const js = jetstream(nc);
      let accepted = 0;
      let refused: unknown;
      for (let i = 0; i < 200 && !refused; i++) {
        try {
          await js.publish(Subjects.events.run("full"), JSON.stringify({ i, pad: "x".repeat(1024) }));
          accepted++;
        } catch (err) {
          refused = err;
        }
      }
      assert.ok(
        refused instanceof JetStreamApiError,
        `a publish past the cap is refused: ${String(refused)}`,
      );
      const info = await jsm.streams.info(Streams.events.name);
      assert.equal(info.state.messages, accepted, "every accepted message is still there");
      assert.equal(info.state.first_seq, 1, "nothing old was dropped to make room");
    });
  });

  it("refuses a stream or bucket made with other settings, naming the setting", async () => {
    await onOwnNats(startNats, async (nc, jsm) => {
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
      // A bucket an older evalfleet made with other limits (jobs expired after 30 days, dropping a long run's
      // config) is changed in place, its keys kept.
      const oldJobs = await new Kvm(nc).create(Buckets.jobs.name, { history: 5, ttl: 30 * 86_400_000 });
      await oldJobs.put("run.kept", "config");
      await ensureTopology(nc, jsm);
      const jobs = await new Kvm(nc).open(Buckets.jobs.name);
      const status = await jobs.status();
      assert.equal(status.ttl, 0, "jobs no longer expire");
      assert.equal(status.history, Buckets.jobs.history);
      assert.equal((await jobs.get("run.kept"))?.string(), "config");
      // Streams keep everything until pruned, and a full one refuses rather than drops.
      for (const def of Object.values(Streams)) {
        const c = (await jsm.streams.info(def.name)).config;
        assert.equal(c.max_age, 0, `${def.name} has no age limit`);
        assert.equal(c.discard, DiscardPolicy.New, `${def.name} refuses when full`);
      }
    });
  });
});

describe("three-node cluster helper", () => {
  it("serves JetStream with replicated streams and survives a node kill", async () => {
    await onOwnNats(
      () => startNatsCluster(3),
      async (nc, jsm, cluster) => {
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
      },
    );
  });
});
