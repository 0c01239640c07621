import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { retryDelayMs } from "../../actors/runtime/actor.js";
import { ErrorCode, RetryableError } from "../../protocol/errors.js";

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
