import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { nanoToNumber, nanoToUsd, usdToNano, usdToNanoNumber } from "../../protocol/money.js";
import { freshDb } from "../helpers/db.js";
import { forSuite } from "../helpers/suite.js";

describe("money: USD decimal strings <-> integer nano-USD", () => {
  test("exact parsing", () => {
    const cases: [string | number, bigint][] = [
      ["0", 0n],
      ["0.000000000", 0n],
      ["1", 1_000_000_000n],
      ["1.", 1_000_000_000n],
      [".5", 500_000_000n],
      ["-0.000000001", -1n],
      ["+2.25", 2_250_000_000n],
      ["12345678901.123456789", 12_345_678_901_123_456_789n],
      ["0.1", 100_000_000n],
      ["1e-7", 100n],
      ["1.5E3", 1_500_000_000_000n],
      [0.1, 100_000_000n], // String(0.1) is "0.1": no binary noise leaks in
      [1e-7, 100n],
      [3, 3_000_000_000n],
      [1.5, 1_500_000_000n], // config numbers (max_cost_usd) as the task reads them
      [0.000000001, 1n],
      [25, 25_000_000_000n],
      ["  7.000000001 ", 7_000_000_001n],
    ];
    for (const [input, want] of cases) assert.equal(usdToNano(input), want, String(input));
  });

  test("more than nine decimals round half away from zero, like NUMERIC(20,9)", () => {
    assert.equal(usdToNano("0.0000000005"), 1n);
    assert.equal(usdToNano("0.0000000004999"), 0n);
    assert.equal(usdToNano("-0.0000000005"), -1n);
    assert.equal(usdToNano("1.9999999995"), 2_000_000_000n);
    assert.equal(usdToNano("6e-10"), 1n);
    assert.equal(usdToNano("1e-12"), 0n);
  });

  test("rejects what is not an amount", () => {
    for (const bad of ["", ".", "abc", "1.2.3", "1,5", "--1", "0x10", "1e", "NaN", "Infinity"]) {
      assert.throws(() => usdToNano(bad), RangeError, bad);
    }
    assert.throws(() => usdToNano(Number.NaN), RangeError);
    assert.throws(() => usdToNano(Number.POSITIVE_INFINITY), RangeError);
  });

  test("formatting and safe-integer guards", () => {
    assert.equal(nanoToUsd(0), "0.000000000");
    assert.equal(nanoToUsd(1), "0.000000001");
    assert.equal(nanoToUsd(-1), "-0.000000001");
    assert.equal(nanoToUsd(-1_500_000_000n), "-1.500000000");
    assert.equal(nanoToUsd(99_999_999_999_999_999_999n), "99999999999.999999999");
    assert.equal(nanoToUsd(Number.MAX_SAFE_INTEGER), "9007199.254740991");
    assert.throws(() => nanoToUsd(0.5), RangeError);
    assert.throws(() => nanoToUsd(2 ** 53), RangeError);
    assert.throws(() => nanoToNumber(2n ** 53n), RangeError);
    assert.equal(nanoToNumber(2n ** 53n - 1n), Number.MAX_SAFE_INTEGER);
    assert.equal(usdToNanoNumber(null), null);
    assert.equal(usdToNanoNumber("0.000000042"), 42);
  });

  test("round trip is exact for every nano amount", () => {
    fc.assert(
      fc.property(fc.bigInt({ min: -(10n ** 20n), max: 10n ** 20n }), (n) => usdToNano(nanoToUsd(n)) === n),
    );
  });

  test("summing a million 0.1-dollar calls in nano is exact (a float sum is not)", () => {
    let nano = 0n;
    let float = 0;
    for (let i = 0; i < 1_000_000; i++) {
      nano += usdToNano("0.1");
      float += 0.1;
    }
    assert.equal(nanoToUsd(nano), "100000.000000000");
    assert.notEqual(float, 100000);
  });
});

describe(`money through the database (${process.env.DATABASE_URL ? "postgres" : "pglite"})`, () => {
  const f = forSuite(
    () => freshDb("store-money", { migrate: false }),
    (db) => db.cleanup(),
  );

  test("NUMERIC(20,9) round-trips nano-USD exactly, extremes included", async () => {
    await f().db.query("CREATE TABLE m (v NUMERIC(20,9))");
    const values = [0n, 1n, -1n, 123_456_789n, 99_999_999_999_999_999_999n, -99_999_999_999_999_999_999n];
    for (const v of values) await f().db.query("INSERT INTO m VALUES ($1::numeric)", [nanoToUsd(v)]);
    const r = await f().db.query<{ v: string }>("SELECT v FROM m");
    assert.deepEqual(
      r.rows.map((x) => usdToNano(x.v)),
      values,
    );
    // The database's own rounding agrees with ours.
    const rounded = await f().db.query<{ v: string }>(
      "SELECT '0.0000000005'::numeric(20,9)::text AS v UNION ALL SELECT '-1.9999999995'::numeric(20,9)::text",
    );
    assert.deepEqual(
      rounded.rows.map((x) => usdToNano(x.v)),
      [usdToNano("0.0000000005"), usdToNano("-1.9999999995")],
    );
    const sum = await f().db.query<{ s: string }>("SELECT sum(v)::text AS s FROM m WHERE v > 0 AND v < 1");
    assert.equal(usdToNano(sum.rows[0]!.s), 123_456_790n);
  });
});
