/**
 * plane/kv.ts against a real nats-server: values decoded through their schemas (a bad one names its key), create
 * and update report a conflict by JetStream's error code, and compare-and-set from many writers at once loses no
 * change.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { z } from "zod";
import { compareAndSet, TypedKv } from "../../plane/kv.js";
import { ValidationError } from "../../protocol/errors.js";
import { startNats, type TestNats } from "../helpers/nats.js";

const Counter = z.object({ n: z.number().int(), by: z.array(z.string()) });

let nats: TestNats;
let nc: NatsConnection;

before(async () => {
  nats = await startNats();
  nc = await connect({ ...nats.connectOptions });
});
after(async () => {
  await nc?.close();
  await nats?.cleanup();
});

describe("typed KV and compare-and-set", () => {
  it("decodes through the schema; a value that breaks it is a ValidationError naming bucket and key", async () => {
    const kv = await new Kvm(nc).create("typed");
    const counters = new TypedKv(kv, Counter, "counter");
    assert.equal(await counters.get("a"), null);
    await counters.put("a", { n: 1, by: [] });
    assert.deepEqual((await counters.get("a"))?.value, { n: 1, by: [] });
    await kv.put("b", JSON.stringify({ n: "one" }));
    await assert.rejects(counters.get("b"), (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      assert.match(e.message, /counter at typed\/b/);
      return true;
    });
    await kv.delete("a");
    assert.equal(await counters.get("a"), null, "a deleted key holds no value");
  });

  it("create and update answer null on a conflict, by error code", async () => {
    const counters = new TypedKv(await new Kvm(nc).create("conflicts"), Counter, "counter");
    const rev = await counters.create("k", { n: 0, by: [] });
    assert.ok(rev !== null);
    assert.equal(await counters.create("k", { n: 9, by: [] }), null);
    assert.equal(await counters.update("k", { n: 9, by: [] }, rev + 100), null);
    assert.ok((await counters.update("k", { n: 1, by: [] }, rev)) !== null);
    assert.equal((await counters.get("k"))?.value.n, 1);
  });

  it("twenty writers incrementing at once: every increment lands exactly once", async () => {
    const counters = new TypedKv(await new Kvm(nc).create("cas"), Counter, "counter");
    let decided = 0;
    const writers = Array.from({ length: 20 }, (_, i) =>
      compareAndSet(counters, "total", (cur) => {
        decided++;
        const v = cur?.value ?? { n: 0, by: [] };
        return { write: { n: v.n + 1, by: [...v.by, `w${i}`] }, result: v.n + 1 };
      }),
    );
    const seen = await Promise.all(writers);
    const final = (await counters.get("total"))?.value;
    assert.equal(final?.n, 20);
    assert.equal(new Set(final?.by).size, 20);
    assert.deepEqual(
      [...seen].sort((a, b) => a - b),
      Array.from({ length: 20 }, (_, i) => i + 1),
      "each writer saw its own increment",
    );
    assert.ok(decided > 20, "some writers lost a race and decided again");
  });

  it("a decision to write nothing writes nothing", async () => {
    const kv = await new Kvm(nc).create("noop");
    const counters = new TypedKv(kv, Counter, "counter");
    const r = await compareAndSet(counters, "x", () => ({ result: "left alone" }));
    assert.equal(r, "left alone");
    assert.equal(await kv.get("x"), null);
  });
});
