import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { openPlane, type Plane } from "../../plane/connect.js";
import { BlobNames } from "../../protocol/subjects.js";
import type { AtifTrajectory } from "../../report/atif.js";
import { openDb } from "../../store/db.js";
import { migrate } from "../../store/migrations.js";
import { saveRunMetadata } from "../../store/results.js";
import { AtifTrajectorySchema } from "../helpers/atif-schema.js";
import { startNats, type TestNats } from "../helpers/nats.js";
import { cellId, HARNESSES, MODEL, RUN, seedReportRun, TASKS } from "./report-seed.js";

/*
 * `evalfleet trajectories RUN --out DIR` against a real nats-server (the attempts' trajectory.jsonl blobs) and an
 * embedded database (the report's seeded run: 12 cells, one retried, three ledger calls per attempt).
 */

const ROOT = path.resolve(import.meta.dirname, "../..");
const run = promisify(execFile);
const REFERENCE = cellId(HARNESSES[0], TASKS[0], 0);
const CLAUDE = cellId(HARNESSES[0], TASKS[1], 0);
const RETRIED = cellId(HARNESSES[0], TASKS[0], 1);

const shimLine = (callId: string) => JSON.stringify({ source: "shim", call: { callId } });
const harness = (event: unknown) => JSON.stringify({ source: "harness", file: "x", event });

/** The reference agent's turns: three calls, each asking for a tool whose result it records. */
function referenceTrajectory(): string {
  const lines = [0, 1, 2].map((k) => shimLine(`${REFERENCE}-a0-c${k}`));
  for (const k of [1, 2, 3])
    lines.push(
      harness({
        turn: k,
        assistant: {
          role: "assistant",
          content: `turn ${k}`,
          tool_calls: [
            { id: `call_${k}`, type: "function", function: { name: "bash", arguments: `{"cmd":"ls ${k}"}` } },
          ],
        },
        tool_results: [{ id: `call_${k}`, name: "bash", result: `listing ${k}` }],
      }),
    );
  return `${lines.join("\n")}\n`;
}

/** Claude Code's stream-json: an assistant message per call (content blocks streamed apart), tool results after. */
function claudeTrajectory(): string {
  const lines = [harness({ type: "system", subtype: "init", session_id: "s" })];
  for (const k of [1, 2, 3]) {
    lines.push(
      harness({
        type: "assistant",
        message: { id: `msg_${k}`, content: [{ type: "thinking", thinking: `plan ${k}` }] },
      }),
      harness({
        type: "assistant",
        message: {
          id: `msg_${k}`,
          content: [{ type: "tool_use", id: `toolu_${k}`, name: "Edit", input: { file: `f${k}` } }],
        },
      }),
      harness({
        type: "user",
        message: {
          content: [
            { type: "tool_result", tool_use_id: `toolu_${k}`, content: [{ type: "text", text: `ok ${k}` }] },
          ],
        },
      }),
    );
  }
  lines.push(harness({ type: "result", subtype: "success" }), "not json at all");
  return `${lines.join("\n")}\n`;
}

describe("`evalfleet trajectories`: one ATIF file per attempt", () => {
  let dir: string;
  let nats: TestNats;
  let plane: Plane;
  const { DATABASE_URL: _pg, NODE_TEST_CONTEXT: _t, ...env } = process.env;
  const cli = (...args: string[]) =>
    run(process.execPath, [path.join(ROOT, "bin/evalfleet.js"), ...args, "--state-dir", dir], {
      cwd: ROOT,
      env: { ...env, ...nats.env },
    });

  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "ef-traj-"));
    nats = await startNats();
    plane = await openPlane({ nats: nats.settings, name: "traj-test" });
    const db = await openDb({ dataDir: path.join(dir, "pglite") });
    await migrate(db);
    await seedReportRun(db);
    await saveRunMetadata(db, {
      runName: RUN,
      config: { name: RUN, harnesses: [{ name: HARNESSES[0], adapter: "reference", version: "1.2" }] },
      version: "test",
    });
    await db.close();
    const put = (cell: string, attempt: number, text: string) =>
      plane.blobs.putBlob(
        { name: BlobNames.attempt(RUN, cell, attempt, "trajectory.jsonl") },
        new TextEncoder().encode(text),
      );
    await put(REFERENCE, 0, referenceTrajectory());
    await put(CLAUDE, 0, claudeTrajectory());
    // Two turns recorded for three calls: not aligned.
    await put(
      RETRIED,
      0,
      harness({ turn: 1, assistant: { content: "a" } }) +
        "\n" +
        harness({ turn: 2, assistant: { content: "b" } }),
    );
  });
  after(async () => {
    await plane?.close();
    await nats?.cleanup();
    await rm(dir, { recursive: true, force: true });
  });

  it("writes every attempt, retried ones included, and each validates against the ATIF schema", async () => {
    const out = path.join(dir, "atif");
    const { stdout } = await cli("trajectories", RUN, "--out", out);
    assert.match(stdout, /13 ATIF file\(s\) written/);
    assert.match(stdout, /10 without the harness's own trajectory/);
    const files = (await readdir(out)).sort();
    assert.equal(files.length, 13, "12 cells, one of them retried once");
    const db = await openDb({ dataDir: path.join(dir, "pglite") });
    try {
      for (const f of files) {
        const doc: unknown = JSON.parse(await readFile(path.join(out, f), "utf8"));
        const parsed = AtifTrajectorySchema.safeParse(doc);
        assert.ok(parsed.success, `${f}: ${JSON.stringify(parsed.error?.issues)}`);
        const t = doc as AtifTrajectory;
        const { cell_id: cell, attempt } = t.extra.evalfleet as { cell_id: string; attempt: number };
        // Per step: the ledger's tokens, cost, latency and pacer wait for that call.
        const rows = await db.query<{
          cost: string;
          wait: number;
          lat: number;
          i: number;
          o: number;
          cr: number;
          cw: number;
        }>(
          `SELECT cost_nano_usd::text AS cost, pacer_wait_ms AS wait, latency_ms AS lat, input_tokens AS i,
                  output_tokens AS o, cache_read_tokens AS cr, cache_write_tokens AS cw
             FROM ledger_calls WHERE run_name = $1 AND cell_id = $2 AND attempt = $3
            ORDER BY COALESCE(started_at, created_at), call_id`,
          [RUN, cell, attempt],
        );
        const agentSteps = t.steps.filter((s) => s.source === "agent");
        assert.equal(agentSteps.length, rows.rowCount, f);
        for (const [i, s] of agentSteps.entries()) {
          const r = rows.rows[i]!;
          const m = s.metrics!;
          assert.equal(m.extra.cost_nano_usd, Number(r.cost));
          assert.equal(m.cost_usd, Number(r.cost) / 1e9);
          assert.equal(m.extra.pacer_wait_ms, r.wait);
          assert.equal(m.extra.latency_ms, r.lat);
          // the ledger's input_tokens is the whole prompt, cache reads and writes included
          assert.equal(m.prompt_tokens, Number(r.i));
          assert.equal(m.cached_tokens, Number(r.cr));
          assert.equal(m.completion_tokens, Number(r.o));
          assert.equal(s.model_name, MODEL);
        }
        const total = rows.rows.reduce((a, r) => a + Number(r.cost), 0);
        assert.equal(t.final_metrics.extra.total_cost_nano_usd, total);
      }
    } finally {
      await db.close();
    }
  });

  it("the harness's turns become the steps' messages, tool calls and observations", async () => {
    const out = path.join(dir, "one");
    await cli("trajectories", RUN, "--out", out, "--cell", REFERENCE);
    const ref = JSON.parse(
      await readFile(path.join(out, (await readdir(out))[0]!), "utf8"),
    ) as AtifTrajectory;
    assert.equal(ref.agent.version, "1.2");
    const step = ref.steps[1]!;
    assert.equal(step.message, "turn 1");
    assert.deepEqual(step.tool_calls, [
      { tool_call_id: "call_1", function_name: "bash", arguments: { cmd: "ls 1" } },
    ]);
    assert.deepEqual(step.observation, { results: [{ source_call_id: "call_1", content: "listing 1" }] });

    const out2 = path.join(dir, "two");
    await cli("trajectories", RUN, "--out", out2, "--cell", CLAUDE);
    const cc = JSON.parse(
      await readFile(path.join(out2, (await readdir(out2))[0]!), "utf8"),
    ) as AtifTrajectory;
    const s3 = cc.steps[3]!;
    assert.equal(s3.reasoning_content, "plan 3");
    assert.deepEqual(s3.tool_calls?.[0], {
      tool_call_id: "toolu_3",
      function_name: "Edit",
      arguments: { file: "f3" },
    });
    assert.deepEqual(s3.observation, { results: [{ source_call_id: "toolu_3", content: "ok 3" }] });
    assert.equal((cc.extra.harness_events as unknown[]).length, 3, "init, result and the text line are kept");

    const out3 = path.join(dir, "three");
    await cli("trajectories", RUN, "--out", out3, "--cell", RETRIED);
    const first = JSON.parse(
      await readFile(path.join(out3, `${RETRIED}.attempt-0.json`), "utf8"),
    ) as AtifTrajectory;
    assert.match(first.notes, /2 turn\(s\) for 3 call\(s\)/);
    assert.equal((first.extra.harness_turns as unknown[]).length, 2);
    assert.equal((first.extra.evalfleet as { status: string }).status, "RETRIED");
  });

  it("the schema check refuses what ATIF does not allow", () => {
    const ok = {
      schema_version: "ATIF-v1.4",
      session_id: "s",
      agent: { name: "a", version: "1" },
      steps: [
        { step_id: 1, source: "user", message: "do it" },
        {
          step_id: 2,
          source: "agent",
          message: "",
          tool_calls: [{ tool_call_id: "c1", function_name: "f", arguments: {} }],
          observation: { results: [{ source_call_id: "c1", content: "x" }] },
        },
      ],
    };
    assert.ok(AtifTrajectorySchema.safeParse(ok).success);
    const bad = (f: (d: typeof ok & Record<string, unknown>) => void) => {
      const d = structuredClone(ok) as typeof ok & Record<string, unknown>;
      f(d);
      return AtifTrajectorySchema.safeParse(d).success;
    };
    assert.equal(
      bad((d) => {
        d.steps[1]!.step_id = 3;
      }),
      false,
      "step ids sequential",
    );
    assert.equal(
      bad((d) => {
        Object.assign(d.steps[0]!, { metrics: {} });
      }),
      false,
      "metrics on a user step",
    );
    assert.equal(
      bad((d) => {
        d.unknown = 1;
      }),
      false,
      "unknown root field",
    );
    assert.equal(
      bad((d) => {
        d.steps[1]!.observation!.results[0]!.source_call_id = "c9";
      }),
      false,
      "dangling call id",
    );
    assert.equal(
      bad((d) => {
        Object.assign(d.steps[0]!, { timestamp: "yesterday" });
      }),
      false,
      "timestamp",
    );
    assert.equal(
      bad((d) => {
        d.steps[0]!.source = "tool";
      }),
      false,
      "source",
    );
  });

  it("a cell the run does not have is refused with what to do", async () => {
    await assert.rejects(
      cli("trajectories", RUN, "--out", path.join(dir, "x"), "--cell", "nope"),
      (e: { code: number; stderr: string }) => {
        assert.equal(e.code, 2);
        assert.match(e.stderr, /no attempt row for cell "nope".*evalfleet report/);
        return true;
      },
    );
  });
});
