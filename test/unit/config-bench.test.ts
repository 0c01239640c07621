import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { loadBenchGroups } from "../../config/bench.js";
import { ValidationError } from "../../protocol/errors.js";

describe("bench settings (config/bench.ts)", () => {
  test("defaults when nothing is set; a computed default follows the value it depends on", () => {
    const { bench } = loadBenchGroups("scale", {});
    assert.deepEqual(bench, {
      attempts: 20_000,
      thinkS: 40,
      calls: 0,
      deadlineS: 540,
      logLevel: "silent",
      workers: 8,
    });
    assert.equal(loadBenchGroups("scale", { BENCH_ATTEMPTS: "5000" }).bench.workers, 2);
    assert.equal(loadBenchGroups("scale", { BENCH_ATTEMPTS: "5000", BENCH_WORKERS: "3" }).bench.workers, 3);
  });

  test("values from the environment are typed; the children's environment is handed on", () => {
    const { bench, host } = loadBenchGroups("shim", {
      BENCH_PIN: "yes",
      BENCH_SHIM_NODE_ARGS: "--max-old-space-size=512  --trace-gc",
      UPSTREAM: "http://127.0.0.1:9",
      HOME: "/home/bench",
    });
    assert.equal(bench.pin, true);
    assert.deepEqual(bench.shimNodeArgs, ["--max-old-space-size=512", "--trace-gc"]);
    assert.equal(bench.upstream, "http://127.0.0.1:9");
    assert.equal(host.inheritedEnv.HOME, "/home/bench");
  });

  test("a wrong value is refused, naming each variable and where the knobs are listed", () => {
    try {
      loadBenchGroups("plane", { BENCH_REPEATS: "two", BENCH_PARALLEL: "-1" });
      assert.fail("expected the settings to be refused");
    } catch (err) {
      assert.ok(err instanceof ValidationError, String(err));
      assert.match(
        err.message,
        /bench:plane settings are not valid.*docs\/configuration\.md.*\n.*BENCH_REPEATS/s,
      );
      assert.deepEqual(err.issues.map((i) => i.path).sort(), ["BENCH_PARALLEL", "BENCH_REPEATS"]);
    }
  });
});
