import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { retryDelayMs } from "../../actors/runtime/actor.js";
import { ErrorCode, RetryableError, toEvalfleetError } from "../../protocol/errors.js";

describe("how long a failed message waits before its next delivery", () => {
  const down = new RetryableError(ErrorCode.Unavailable, "database unavailable: connect ECONNREFUSED");
  const conflict = new RetryableError(ErrorCode.Conflict, "attempt 1 of c is being launched elsewhere");

  it("a dependency that is down: short and capped, so work resumes within ~2 s of it coming back", () => {
    const waits = Array.from({ length: 12 }, (_, i) => retryDelayMs(down, i + 1, () => 0.5));
    assert.deepEqual(waits.slice(0, 4), [250, 500, 1_000, 2_000]);
    assert.ok(waits.every((w) => w <= 2_000));
    assert.equal(
      retryDelayMs(down, 50, () => 1),
      2_400,
      "jitter stays within +20%",
    );
  });

  it("other retryable failures back off as before, up to 30 s", () => {
    const waits = [1, 2, 3, 4, 5, 9].map((n) => retryDelayMs(conflict, n, () => 0.5));
    assert.deepEqual(waits, [250, 1_000, 5_000, 15_000, 30_000, 30_000]);
  });

  it("spreads messages that failed together (jitter), never below 80% of the step", () => {
    const lo = retryDelayMs(down, 4, () => 0);
    const hi = retryDelayMs(down, 4, () => 0.999);
    assert.equal(lo, 1_600);
    assert.ok(hi > 2_350 && hi <= 2_400);
  });
});

describe("which failures are worth another delivery", () => {
  const named = (name: string, message: string) => Object.assign(new Error(message), { name });

  it("NATS away or slow is retryable (Unavailable), so a cell is never terminated for an outage", () => {
    for (const e of [
      named("TimeoutError", "timeout"),
      named("ClosedConnectionError", "closed connection"),
      named("NoRespondersError", "no responders: '$JS.API.STREAM.INFO.KV_budgets'"),
      named("RequestError", "error while processing request"),
      named("JetStreamStatusError", "request timed out"),
      named("JetStreamApiError", "JetStream system temporarily unavailable: no suitable peers for placement"),
    ]) {
      const c = toEvalfleetError(e);
      assert.equal(c.retryable, true, e.name);
      assert.equal(c.code, ErrorCode.Unavailable, e.name);
    }
  });

  it("a bug stays non-retryable (terminated after its tries, with an event)", () => {
    for (const e of [
      new TypeError("undefined is not a function"),
      named("JetStreamApiError", "stream name already in use"),
    ]) {
      const c = toEvalfleetError(e);
      assert.equal(c.retryable, false, e.message);
      assert.equal(c.code, ErrorCode.Internal);
    }
  });
});
