import assert from "node:assert/strict";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import fc from "fast-check";
import { stringify } from "yaml";
import { loadTaskLibrary } from "../../actors/planner/library.js";
import { planRun, Rejection } from "../../actors/planner/plan.js";
import { importSwebench } from "../../cli/commands/tasks.js";
import { RunConfigSchema, TaskSpecSchema } from "../../protocol/config.js";
import { ValidationError } from "../../protocol/errors.js";
import { hostileValue, mutated, nest } from "../helpers/hostile.js";

/** A SWE-bench dataset record, with the fields evalfleet adds. */
const record = {
  instance_id: "astropy__astropy-12907",
  repo: "astropy/astropy",
  base_commit: "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
  environment_setup_commit: "298ccb478e6bf092953bca67a3d29dc6c35f6752",
  version: "4.3",
  problem_statement: "Modeling's `separability_matrix` does not compute separability correctly",
  FAIL_TO_PASS: '["astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]"]',
  PASS_TO_PASS: '["astropy/modeling/tests/test_separable.py::test_coord_matrix"]',
  test_patch: "diff --git a/x b/x\n",
  patch: "diff --git a/y b/y\n",
  hints_text: "",
  created_at: "2022-03-03T15:14:54Z",
};
const local = {
  id: "calc",
  track: "swe",
  repo_path: "repos/calc",
  test_command: "node test.js",
  FAIL_TO_PASS: ["test.js::add"],
  phases: [{ name: "impl", model_role: "implementation", prompt: "go" }],
  image: "swebench/sweb.eval.x86_64.calc:latest",
};

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), "ef-task-spec-"));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

let seq = 0;
/** A fresh folder holding the given files. */
async function library(files: Record<string, string>): Promise<string> {
  const d = join(dir, `lib-${++seq}`);
  await rm(d, { recursive: true, force: true });
  const { mkdir } = await import("node:fs/promises");
  await mkdir(d, { recursive: true });
  for (const [name, text] of Object.entries(files)) await writeFile(join(d, name), text);
  return d;
}

/** A task library loads (every spec storable as JSON and valid again) or is refused with a path in every file. */
async function checkLibrary(d: string, files: string[]): Promise<void> {
  try {
    const lib = await loadTaskLibrary(d);
    for (const t of lib.tasks.values()) {
      const stored = JSON.parse(JSON.stringify(t)) as unknown;
      assert.equal(TaskSpecSchema.parse(stored).id, t.id);
    }
  } catch (err) {
    assert.ok(err instanceof ValidationError, `not a ValidationError: ${String(err)}`);
    assert.ok(err.issues.length > 0);
    for (const i of err.issues) {
      assert.ok(
        files.some((f) => i.path === f || i.path.startsWith(`${f}:`)),
        `issue without its file: ${i.path}`,
      );
      assert.ok(i.reason.trim().length > 0);
    }
  }
}

describe("task specs: hostile input (property-based)", () => {
  it("both examples are valid", () => {
    assert.equal(TaskSpecSchema.parse({ ...record, id: record.instance_id }).id, record.instance_id);
    assert.equal(TaskSpecSchema.parse(local).id, "calc");
  });

  it("the schema never throws, whatever the value", () => {
    fc.assert(
      fc.property(fc.oneof(hostileValue(), mutated(local), mutated({ ...record, id: "x" })), (v) => {
        const r = TaskSpecSchema.safeParse(v);
        if (!r.success) assert.ok(r.error.issues.every((i) => i.message.length > 0));
      }),
      { numRuns: 2000 },
    );
  });

  it("a task library of mutated specs, as YAML or JSON files: loads storable specs or names the file and field", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(mutated(local), fc.boolean()), { minLength: 1, maxLength: 3 }),
        async (docs) => {
          const files: Record<string, string> = {};
          docs.forEach(([doc, yaml], i) => {
            let text: string;
            try {
              text = yaml ? stringify(doc ?? null) : JSON.stringify(doc ?? null);
            } catch {
              text = JSON.stringify(doc ?? null);
            }
            files[`t${i}.${yaml ? "yaml" : "json"}`] = text;
          });
          await checkLibrary(await library(files), Object.keys(files));
        },
      ),
      { numRuns: 150 },
    );
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  });

  it("task files too deep, self-referential, tagged or broken are refused with the file's name", async () => {
    const files = {
      "deep.json": `{"id": "deep", "extra": ${"[".repeat(50_000)}${"]".repeat(50_000)}}`,
      "deep2.json": JSON.stringify({ id: "deep2", extra: nest(100) }),
      "alias.yaml": "id: alias\nextra: &a [*a]\n",
      "tagged.yaml": "id: tagged\nextra: !!set {a, b}\n",
      "yamldeep.yaml": `id: yamldeep\nextra: ${"[".repeat(5000)}${"]".repeat(5000)}\n`,
      "broken.yaml": "id: [unclosed\n",
      "list.json": "[1, 2]",
      "null.yaml": "~\n",
      "proto.json":
        '{"id": "proto", "__proto__": {"polluted": 1}, "constructor": {"prototype": {"polluted": 1}}}',
    };
    const d = await library(files);
    await checkLibrary(d, Object.keys(files));
    await assert.rejects(loadTaskLibrary(d), (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      const files = new Set(e.issues.map((i) => i.path.split(":")[0]));
      for (const f of [
        "deep.json",
        "alias.yaml",
        "tagged.yaml",
        "yamldeep.yaml",
        "broken.yaml",
        "list.json",
        "null.yaml",
      ])
        assert.ok(files.has(f), `${f} not reported: ${JSON.stringify(e.issues)}`);
      assert.ok(!files.has("proto.json"), "own __proto__ / constructor keys are just extra fields");
      return true;
    });
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  });

  it("fields that become paths, git arguments and image references refuse what would escape or inject", () => {
    const bad: Array<[string, unknown]> = [
      ["repo_path", "../../etc"],
      ["repo_path", "/etc"],
      ["repo_path", "repos/../../../home"],
      ["repo_path", "C:\\Windows"],
      ["repo_path", "repos\\..\\..\\x"],
      ["repo_path", "a\u0000b"],
      ["repo", "astropy"],
      ["repo", "a/b/c"],
      ["repo", "-o/x"],
      ["repo", "../x"],
      ["repo", "a/.."],
      ["repo", "a b/c"],
      ["base_commit", "--upload-pack=touch /tmp/pwned"],
      ["base_commit", "-x"],
      ["base_commit", "main..evil"],
      ["base_commit", "abc; rm -rf ~"],
      ["base_commit", "$(id)"],
      ["environment_setup_commit", "-v"],
      ["image", "-v /:/host"],
      ["image", "--privileged"],
      ["image", "img name"],
      ["instance_id", "a b"],
      ["instance_id", "../x"],
      ["instance_id", "__proto__"],
      ["id", "constructor"],
    ];
    for (const [field, value] of bad) {
      const r = TaskSpecSchema.safeParse({ ...local, [field]: value });
      assert.ok(!r.success, `${field}: ${JSON.stringify(value)} accepted`);
      assert.ok(
        r.error.issues.some((i) => i.path[0] === field && i.message.length > 20),
        `${field}: ${JSON.stringify(r.error.issues)}`,
      );
    }
    for (const [field, value] of [
      ["repo", "chartjs/Chart.js"],
      ["repo", "owner/.github"],
      ["base_commit", "v1.2.3"],
      ["base_commit", "release/2.0"],
      ["image", "ghcr.io/org/img:tag@sha256:abc"],
      ["repo_path", "repos/calc/"],
    ] as const)
      assert.ok(TaskSpecSchema.safeParse({ ...local, [field]: value }).success, `${field}: ${value}`);
  });

  it("a run over a hostile library is a Rejection naming the task file, never a crash", async () => {
    const d = await library({
      "ok.yaml": stringify({ ...local, id: "ok" }),
      "escape.yaml": stringify({ ...local, id: "escape", repo_path: "../../../../etc" }),
    });
    const config = RunConfigSchema.parse({
      name: "r",
      harnesses: [{ name: "h", adapter: "command" }],
      models: [{ name: "m", prices: { input_per_mtok: 1, output_per_mtok: 2 } }],
      tasks: ["*"],
      task_library_path: d,
    });
    await assert.rejects(
      planRun(config, [dir]),
      (e: unknown) =>
        e instanceof Rejection &&
        e.runName === "r" &&
        e.issues.some((i) => i.path === "escape.yaml:repo_path"),
    );
  });
});

describe("tasks import: hostile dataset records", () => {
  const jsonl = async (lines: string[]) => {
    const f = join(dir, `records-${++seq}.jsonl`);
    await writeFile(f, lines.join("\n"));
    return f;
  };

  it("any line writes a library that loads back, or reports every bad line and writes nothing", async () => {
    const line = fc.oneof(
      mutated(record).map((r) => JSON.stringify(r ?? null)),
      hostileValue().map((v) => JSON.stringify(v ?? null)),
      fc.constantFrom("null", "[]", "42", '"x"', "{", "", "   ", JSON.stringify(record)),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(line, { minLength: 1, maxLength: 4 }), async (lines) => {
        const out = join(dir, `imported-${++seq}`);
        try {
          const r = await importSwebench(await jsonl(lines), out);
          const lib = await loadTaskLibrary(out);
          assert.equal(lib.tasks.size, r.written);
          assert.equal((await readdir(out)).length, r.written, "one file per task, all inside the folder");
        } catch (err) {
          assert.ok(err instanceof ValidationError, `not a ValidationError: ${String(err)}`);
          assert.ok(
            err.issues.every((i) => /^line \d+/.test(i.path) && i.reason.length > 0),
            JSON.stringify(err.issues),
          );
          await assert.rejects(readdir(out), { code: "ENOENT" });
        }
      }),
      { numRuns: 150 },
    );
  });

  it("null, lists and repeated instance ids are reported by line", async () => {
    const f = await jsonl(["null", "[1]", JSON.stringify(record), JSON.stringify(record), "7"]);
    await assert.rejects(importSwebench(f, join(dir, "never")), (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      assert.deepEqual(
        e.issues.map((i) => i.path),
        ["line 1", "line 2", "line 4:instance_id", "line 5"],
      );
      return true;
    });
  });
});
