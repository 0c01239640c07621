import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { estimateNanoUsd } from "../../actors/dispatcher/budget.js";
import { buildMatrix, cellIdOf, isExempt } from "../../actors/planner/matrix.js";
import { type RunConfig, RunConfigSchema, type TaskSpec, TaskSpecSchema } from "../../protocol/config.js";
import { EvalfleetError, ValidationError } from "../../protocol/errors.js";

function config(over: Partial<Record<string, unknown>> = {}): RunConfig {
  return RunConfigSchema.parse({
    name: "r",
    harnesses: [{ name: "h", adapter: "command" }],
    models: [{ name: "m" }],
    tasks: ["*"],
    ...over,
  });
}
const task = (id: string, extra: Record<string, unknown> = {}): TaskSpec =>
  TaskSpecSchema.parse({ id, ...extra });
const multi = (id: string, review = true) =>
  task(id, {
    track: "multi_phase",
    phases: [
      { name: "implement", model_role: "implementation" },
      ...(review ? [{ name: "review", model_role: "review" }] : []),
    ],
  });

describe("matrix expansion (the seed's examples)", () => {
  it("5 harnesses × 2 models × 20 tasks × 5 repeats = 1000 cells with unique ids", () => {
    const cfg = config({
      harnesses: ["a", "b", "c", "d", "e"].map((name) => ({ name, adapter: "command" })),
      models: [{ name: "m1" }, { name: "m2" }],
      repeats: 5,
    });
    const tasks = Array.from({ length: 20 }, (_, i) => task(`swe-bugfix-${String(i).padStart(3, "0")}`));
    const cells = buildMatrix(cfg, tasks);
    assert.equal(cells.length, 1000);
    assert.equal(new Set(cells.map((c) => c.cellId)).size, 1000);
  });

  it("refuses names whose '__' joins make two cells one id, naming the field to rename", () => {
    const clash = (over: Record<string, unknown>, tasks: TaskSpec[], path: string) =>
      assert.throws(
        () => buildMatrix(config(over), tasks),
        (e: unknown) =>
          e instanceof ValidationError &&
          e.issues.length > 0 &&
          e.issues.every((i) => i.path === path && /both make cell id/.test(i.reason)),
      );
    clash(
      {
        harnesses: [
          { name: "a", adapter: "command" },
          { name: "a__b", adapter: "command" },
        ],
        models: [{ name: "b__c" }, { name: "c" }],
      },
      [task("t")],
      "harnesses[1].name",
    );
    clash(
      { models: [{ name: "m" }, { name: "m__astropy" }] },
      [task("astropy__astropy-1"), task("astropy-1")],
      "models[1].name",
    );
    // No '__' in any name, but a trailing and a leading '_' join into the same '___'
    clash(
      {
        harnesses: [
          { name: "a_", adapter: "command" },
          { name: "a", adapter: "command" },
        ],
        models: [{ name: "b" }, { name: "_b" }],
      },
      [task("t")],
      "harnesses[1].name",
    );
    // SWE-bench ids hold '__' themselves; alone they never clash
    assert.equal(
      buildMatrix(config({ repeats: 3 }), [task("astropy__astropy-12907"), task("django__django-1")]).length,
      6,
    );
  });

  it("for any names, either every cell id is distinct or the run is refused (never two cells on one id)", () => {
    // Names from a, b and '_' only, so '__' joins, leading and trailing '_' and repeated names come up often.
    const name = fc.stringMatching(/^[ab_]{1,3}$/);
    fc.assert(
      fc.property(
        fc.array(name, { minLength: 1, maxLength: 3 }),
        fc.array(name, { minLength: 1, maxLength: 3 }),
        fc.array(name, { minLength: 1, maxLength: 3 }),
        fc.integer({ min: 1, max: 12 }),
        (hs, ms, ts, repeats) => {
          let cfg: RunConfig;
          let tasks: TaskSpec[];
          try {
            cfg = config({
              harnesses: hs.map((n) => ({ name: n, adapter: "command" })),
              models: ms.map((n) => ({ name: n })),
              repeats,
            });
            tasks = ts.map((id) => task(id));
          } catch {
            return; // a name the schema refuses never reaches the matrix
          }
          const ids: string[] = [];
          for (const h of hs)
            for (const t of ts)
              for (const m of ms) for (let r = 0; r < repeats; r++) ids.push(cellIdOf(h, m, t, r));
          const clash = new Set(ids).size < ids.length;
          let cells: ReturnType<typeof buildMatrix> | undefined;
          try {
            cells = buildMatrix(cfg, tasks);
          } catch (e) {
            assert.ok(e instanceof ValidationError, String(e));
          }
          if (clash) assert.equal(cells, undefined, `clashing ids accepted: ${ids.join(" ")}`);
          else assert.equal(new Set(cells?.map((c) => c.cellId)).size, ids.length);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it("uses the frozen cell-id format", () => {
    assert.equal(
      cellIdOf("opencode", "claude-sonnet-5", "swe-bugfix-001", 0),
      "opencode__claude-sonnet-5__swe-bugfix-001__r0",
    );
    const cfg = config({
      harnesses: [{ name: "opencode", adapter: "opencode" }],
      models: [{ name: "claude-sonnet-5" }],
    });
    const [c] = buildMatrix(cfg, [task("swe-bugfix-001")]);
    assert.equal(c?.cellId, "opencode__claude-sonnet-5__swe-bugfix-001__r0");
    assert.equal(c?.traceId, c?.cellId);
  });

  it("a multi-phase task with 2 implementation models and 1 review model gives 2 cells per harness per repeat", () => {
    const cfg = config({
      harnesses: [
        { name: "h1", adapter: "command" },
        { name: "h2", adapter: "command" },
      ],
      models: [
        { name: "i1" },
        { name: "i2" },
        { name: "rv", role: "review", prices: { input_per_mtok: 1, output_per_mtok: 2 } },
      ],
      repeats: 3,
    });
    const cells = buildMatrix(cfg, [multi("mp")]);
    assert.equal(cells.length, 2 * 2 * 3);
    for (const h of ["h1", "h2"])
      for (let r = 0; r < 3; r++)
        assert.equal(cells.filter((c) => c.harness.name === h && c.repeat === r).length, 2);
    assert.ok(cells.every((c) => c.cellId.endsWith("__rev-rv")));
    assert.deepEqual(cells[0]?.phaseTraceIds, [
      `${cells[0]?.cellId}__phase-implement`,
      `${cells[0]?.cellId}__phase-review`,
    ]);
    assert.equal(cells[0]?.cellId, "h1__i1__mp__r0__rev-rv");
  });

  it("a multi-phase task without a review phase takes implementation models only, no suffix", () => {
    const cfg = config({
      models: [
        { name: "i1" },
        { name: "rv", role: "review", prices: { input_per_mtok: 1, output_per_mtok: 2 } },
      ],
    });
    const cells = buildMatrix(cfg, [multi("mp", false)]);
    assert.deepEqual(
      cells.map((c) => c.cellId),
      ["h__i1__mp__r0"],
    );
  });

  it("swe tasks take every model, whatever its role", () => {
    const cfg = config({
      models: [
        { name: "i1" },
        { name: "rv", role: "review", prices: { input_per_mtok: 1, output_per_mtok: 2 } },
      ],
    });
    assert.equal(buildMatrix(cfg, [task("t")]).length, 2);
  });

  it("raises when a review phase has no implementation model", () => {
    const cfg = config({
      models: [{ name: "rv", role: "review", prices: { input_per_mtok: 1, output_per_mtok: 2 } }],
    });
    assert.throws(
      () => buildMatrix(cfg, [multi("mp")]),
      (e: unknown) => e instanceof EvalfleetError && /no model has role: implementation/.test(e.message),
    );
  });

  it("raises when a review phase has no review model", () => {
    const cfg = config({ models: [{ name: "i1" }] });
    assert.throws(
      () => buildMatrix(cfg, [multi("mp")]),
      (e: unknown) => e instanceof EvalfleetError && /no model has role: review/.test(e.message),
    );
  });

  // How fast is `npm run bench:plan`'s business; this checks the size and that ids stay unique at that size.
  it("expands 172,050 cells, every id unique", () => {
    const cfg = config({
      harnesses: ["a", "b", "c", "d", "e"].map((name) => ({ name, adapter: "command" })),
      models: [{ name: "m1" }, { name: "m2" }, { name: "m3" }],
      repeats: 5,
    });
    const tasks = Array.from({ length: 2294 }, (_, i) => task(`repo__repo-${i}`));
    const cells = buildMatrix(cfg, tasks);
    assert.equal(cells.length, 172_050);
    assert.equal(new Set(cells.map((c) => c.cellId)).size, 172_050);
  });
});

describe("budget exemption and estimate", () => {
  const sub = { name: "s", cost_mode: "subscription" } as const;
  const plat = { name: "p", cost_mode: "platform" } as const;
  const m = (x: object) =>
    RunConfigSchema.parse({
      name: "r",
      harnesses: [{ name: "h", adapter: "command" }],
      models: [x],
      tasks: ["t"],
    }).models[0]!;
  it("is all-or-nothing", () => {
    assert.equal(isExempt(m(sub), null, task("t")), true);
    assert.equal(isExempt(m(sub), m({ ...sub, role: "review" }), task("t")), true);
    assert.equal(isExempt(m(sub), m({ ...plat, role: "review" }), task("t")), false);
    assert.equal(isExempt(m(plat), null, task("t")), false);
    assert.equal(isExempt(m(sub), null, task("t", { track: "open_ended", rubric: "x" })), false);
  });
  it("estimates 0 when exempt, else the per-attempt cap, else budget / total cells", () => {
    assert.equal(estimateNanoUsd(config({ budget_usd: 10, max_cost_usd: 2 }), true, 10), 0);
    assert.equal(estimateNanoUsd(config({ budget_usd: 10, max_cost_usd: 2 }), false, 10), 2_000_000_000);
    assert.equal(estimateNanoUsd(config({ budget_usd: 10 }), false, 4), 2_500_000_000);
    assert.equal(
      estimateNanoUsd(config({ budget_usd: 1 }), false, 3),
      333_333_333,
      "all three of $1 / 3 fit",
    );
  });
});
