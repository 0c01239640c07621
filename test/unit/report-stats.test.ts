import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { meanPassAtK, median, passAtK, wilson } from "../../report/stats.js";

/** C(n, k) exactly, for the brute-force comparison. */
function comb(n: number, k: number): bigint {
  if (k < 0 || k > n) return 0n;
  let r = 1n;
  for (let i = 1; i <= k; i++) r = (r * BigInt(n - k + i)) / BigInt(i);
  return r;
}

describe("pass@k (unbiased estimator)", () => {
  it("matches 1 - C(n-c,k)/C(n,k) for every n <= 20", () => {
    for (let n = 1; n <= 20; n++)
      for (let c = 0; c <= n; c++)
        for (let k = 1; k <= n; k++) {
          const exact = 1 - Number(comb(n - c, k)) / Number(comb(n, k));
          assert.ok(Math.abs(passAtK(n, c, k) - exact) < 1e-12, `n=${n} c=${c} k=${k}`);
        }
  });
  it("known values", () => {
    assert.equal(passAtK(5, 1, 1), 0.2);
    assert.equal(passAtK(5, 0, 3), 0);
    assert.equal(passAtK(5, 5, 1), 1);
    assert.ok(Math.abs(passAtK(10, 3, 5) - (1 - 21 / 252)) < 1e-12);
    // pass@1 is the plain success fraction
    assert.ok(Math.abs(passAtK(7, 3, 1) - 3 / 7) < 1e-12);
  });
  it("is NaN when there are fewer attempts than k, and rejects nonsense", () => {
    assert.ok(Number.isNaN(passAtK(2, 1, 3)));
    assert.throws(() => passAtK(3, 4, 1), RangeError);
    assert.throws(() => passAtK(3, 1, 0), RangeError);
  });
  it("does not overflow for large n", () => {
    const v = passAtK(10_000, 10, 100);
    assert.ok(v > 0 && v < 1);
  });
  it("averages over tasks and leaves out tasks with fewer than k attempts", () => {
    const r = meanPassAtK(
      [
        { n: 5, c: 0 },
        { n: 5, c: 5 },
        { n: 2, c: 1 },
      ],
      3,
    );
    assert.deepEqual(r, { value: 0.5, tasks: 2, excluded: 1 });
    assert.equal(meanPassAtK([], 1).value, null);
  });
});

describe("Wilson 95% interval", () => {
  const close = (a: number, b: number) => Math.abs(a - b) < 5e-5;
  it("matches published values", () => {
    const a = wilson(5, 10)!;
    assert.ok(close(a.low, 0.23659) && close(a.high, 0.76341), JSON.stringify(a));
    const b = wilson(0, 10)!;
    assert.ok(b.low === 0 && close(b.high, 0.27753), JSON.stringify(b));
    const c = wilson(10, 10)!;
    assert.ok(close(c.low, 0.72247) && c.high === 1, JSON.stringify(c));
    const d = wilson(81, 263)!;
    assert.ok(close(d.low, 0.25529) && close(d.high, 0.36621), JSON.stringify(d));
  });
  it("contains the point estimate and narrows with more trials", () => {
    for (const [s, n] of [
      [1, 3],
      [30, 100],
      [300, 1000],
    ] as const) {
      const w = wilson(s, n)!;
      assert.ok(w.low <= s / n && s / n <= w.high);
    }
    const narrow = wilson(300, 1000)!;
    const wide = wilson(30, 100)!;
    assert.ok(narrow.high - narrow.low < wide.high - wide.low);
  });
  it("is null with no trials", () => {
    assert.equal(wilson(0, 0), null);
  });
});

describe("median", () => {
  it("odd, even, empty, ignores null and NaN", () => {
    assert.equal(median([3, 1, 2]), 2);
    assert.equal(median([4, 1, 3, 2]), 2.5);
    assert.equal(median([]), null);
    assert.equal(median([null, Number.NaN, 5, undefined]), 5);
  });
});
