import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { backoffDelayMs, retry } from "../../lib/retry.js";

const noJitter = () => 0.5;

describe("retry", () => {
  it("backs off exponentially, capped, and jitters symmetrically around the schedule", () => {
    const b = { baseMs: 100, maxMs: 500 };
    assert.deepEqual(
      [1, 2, 3, 4, 5].map((n) => backoffDelayMs(b, n, noJitter)),
      [100, 200, 400, 500, 500],
    );
    assert.equal(
      backoffDelayMs(b, 1, () => 0),
      80,
    );
    assert.equal(
      backoffDelayMs(b, 1, () => 1),
      120,
    );
    assert.equal(
      backoffDelayMs({ ...b, jitter: 1 }, 1, () => 0),
      0,
    );
    assert.equal(backoffDelayMs({ ...b, factor: 3 }, 3, noJitter), 500);
  });

  it("tries until success, waiting the schedule between tries", async () => {
    const waits: number[] = [];
    let calls = 0;
    const v = await retry(
      async (attempt) => {
        calls++;
        if (attempt < 2) throw new Error(`no ${attempt}`);
        return "yes";
      },
      { tries: 5, baseMs: 10, maxMs: 1000, random: noJitter, sleep: async (ms) => void waits.push(ms) },
    );
    assert.equal(v, "yes");
    assert.equal(calls, 3);
    assert.deepEqual(waits, [10, 20]);
  });

  it("rethrows the last error when the tries run out, and an error it must not retry at once", async () => {
    let calls = 0;
    await assert.rejects(
      retry(
        async () => {
          calls++;
          throw new Error(`fail ${calls}`);
        },
        { tries: 3, baseMs: 1, maxMs: 1, sleep: async () => {} },
      ),
      /fail 3/,
    );
    calls = 0;
    await assert.rejects(
      retry(
        async () => {
          calls++;
          throw new TypeError("terminal");
        },
        {
          tries: 3,
          baseMs: 1,
          maxMs: 1,
          retryError: (e) => !(e instanceof TypeError),
          sleep: async () => {},
        },
      ),
      TypeError,
    );
    assert.equal(calls, 1);
  });

  it("retries on a value it is told is a failure, and returns the last one when tries run out", async () => {
    const seen: Array<{ n: number; ms: number }> = [];
    const v = await retry(async (attempt) => ({ ok: false, attempt }), {
      tries: 3,
      baseMs: 5,
      maxMs: 100,
      retryValue: (r) => !r.ok,
      delayFor: (_f, n) => (n === 1 ? 42 : undefined),
      random: noJitter,
      onRetry: (_f, n, ms) => void seen.push({ n, ms }),
      sleep: async () => {},
    });
    assert.deepEqual(v, { ok: false, attempt: 2 });
    assert.deepEqual(seen, [
      { n: 1, ms: 42 },
      { n: 2, ms: 10 },
    ]);
  });

  it("an abort while waiting ends the loop with the abort's reason", async () => {
    const ac = new AbortController();
    let calls = 0;
    const p = retry(
      async () => {
        calls++;
        if (calls === 1) setTimeout(() => ac.abort(new Error("stop now")), 10);
        throw new Error("busy");
      },
      { tries: 10, baseMs: 60_000, maxMs: 60_000, signal: ac.signal },
    );
    await assert.rejects(p, /stop now|aborted/);
    assert.equal(calls, 1);
  });
});
