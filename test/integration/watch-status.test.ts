import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { checkGateway, gatewayUnreachableMessage } from "../../cli/commands/gateway-check.js";
import { openPlane, type Plane } from "../../plane/connect.js";
import {
  type CellProgress,
  type Heartbeat,
  MessageTypes,
  type RunProgress,
} from "../../protocol/messages.js";
import { ProgressKeys, StateKeys } from "../../protocol/subjects.js";
import { freePort, startNats, type TestNats } from "../helpers/nats.js";

const ROOT = path.resolve(import.meta.dirname, "../..");
const SAMPLE = path.join(ROOT, "examples/sample-run.yaml");
const { DATABASE_URL: _pg, NODE_TEST_CONTEXT: _t, ...baseEnv } = process.env;

function runKey(p: Partial<RunProgress> & Pick<RunProgress, "run">): string {
  const v: RunProgress = {
    type: MessageTypes.runProgress,
    phase: "running",
    message: "",
    totalCells: 4,
    completed: 1,
    failed: 1,
    skipped: 0,
    running: 1,
    pending: 1,
    totalCostNanoUsd: 3_000_000_000,
    billableCostNanoUsd: 2_000_000_000,
    budgetNanoUsd: 10_000_000_000,
    updatedAt: new Date().toISOString(),
    pools: { h__m: { fleetSize: 6 } },
    ...p,
  };
  return JSON.stringify(v);
}

function cellValue(run: string, cellId: string, status: CellProgress["status"], i: number): string {
  const v: CellProgress = {
    type: MessageTypes.cellProgress,
    run,
    cellId,
    attempt: 0,
    status,
    usage: {
      inputTokens: 100 * i,
      outputTokens: 10 * i,
      cacheReadTokens: i,
      cacheWriteTokens: 2 * i,
      reasoningTokens: 3 * i,
      costNanoUsd: 5,
      calls: 1,
    },
    turns: 1,
    pacerWaitMs: 1000 * i,
    updatedAt: new Date().toISOString(),
  };
  return JSON.stringify(v);
}

function heartbeat(actor: string, id: string, ageMs: number): string {
  const at = new Date(Date.now() - ageMs).toISOString();
  const v: Heartbeat = {
    type: MessageTypes.heartbeat,
    actor,
    id,
    state: "running",
    pid: 1,
    host: "test",
    startedAt: at,
    at,
    handled: 7,
    failed: 0,
  };
  return JSON.stringify(v);
}

describe("watch, status and the gateway preflight", () => {
  let nats: TestNats;
  let plane: Plane;
  const env = () => ({ ...baseEnv, ...nats.env });
  const cli = (args: string[], extraEnv: Record<string, string> = {}) =>
    promisify(execFile)(process.execPath, ["--import", "tsx", "cli/main.ts", ...args], {
      cwd: ROOT,
      env: { ...env(), ...extraEnv },
    });

  before(async () => {
    nats = await startNats();
    plane = await openPlane({ nats: nats.settings, name: "watch-test" });
    const kv = plane.kv.progress;
    await kv.put(
      ProgressKeys.run("done.run"),
      runKey({ run: "done.run", phase: "finished", running: 0, pending: 0, completed: 3 }),
    );
    for (const [i, st] of (["completed", "failed", "completed", "completed"] as const).entries())
      await kv.put(ProgressKeys.cell("done.run", `c${i}`), cellValue("done.run", `c${i}`, st, i + 1));
    // Fresh heartbeats are stamped ahead of now: the CLI starts in seconds, and a slow machine must not age them.
    await kv.put(ProgressKeys.actor("planner", "p1"), heartbeat("planner", "p1", -60_000));
    await kv.put(ProgressKeys.actor("dispatcher", "d1"), heartbeat("dispatcher", "d1", 120_000));
    await plane.kv.pacer.put(
      StateKeys.pacerPool("h__m"),
      JSON.stringify({
        v: 1,
        owner: "owner-123456789",
        heartbeatWallMs: Date.now() + 60_000,
        checkpoint: { limits: { requestsPerMinute: 60 }, pausedUntilWallMs: 0, overloadStreak: 0 },
        stats: { settledCalls: 9, outputTokensP95: 100 },
      }),
    );
  });
  after(async () => {
    await plane?.close();
    await nats?.cleanup();
  });

  it("status --json: runs, actors with the stale one marked, pools with pacer state and fleet", async () => {
    const s = JSON.parse((await cli(["status", "--json"])).stdout) as {
      runs: Array<{ run: string; phase: string; completed: number }>;
      actors: Array<{ actor: string; stale: boolean }>;
      pools: Array<{ pool: string; ownerAlive: boolean; fleetSize: number; limits: Record<string, number> }>;
    };
    assert.deepEqual(
      s.runs.map((r) => [r.run, r.phase, r.completed]),
      [["done.run", "finished", 3]],
    );
    assert.deepEqual(
      s.actors.map((a) => [a.actor, a.stale]),
      [
        ["dispatcher", true],
        ["planner", false],
      ],
    );
    assert.deepEqual(
      s.pools.map((p) => [p.pool, p.ownerAlive, p.fleetSize, p.limits.requestsPerMinute]),
      [["h__m", true, 6, 60]],
    );
    const text = (await cli(["status"])).stdout;
    assert.match(text, /^Runs\n/);
    assert.match(text, /dispatcher\s+d1\s+STALE \(running\)/);
  });

  it("watch --once --json: counters and money from the run key, tokens and pacer waits summed over cell keys", async () => {
    const s = JSON.parse((await cli(["watch", "done.run", "--once", "--json"])).stdout) as Record<
      string,
      unknown
    >;
    assert.equal(s.phase, "finished");
    assert.equal(s.billableCostNanoUsd, 2_000_000_000);
    assert.deepEqual(s.tokens, { input: 1000, output: 100, cacheRead: 10, cacheWrite: 20, reasoning: 30 });
    assert.equal(s.pacerWaitMs, 10_000);
    assert.deepEqual(s.fleet, { h__m: 6 });
    const text = (await cli(["watch", "done.run", "--once"])).stdout;
    assert.match(text, /cells {3}\[█+▓+█*[^\]]*\] 4\/4 done/);
    assert.match(text, /spend {3}\[█+░+\] billable \$2\.0000 of \$10\.0000 cap \(20\.0%\) · total \$3\.0000/);
    assert.match(text, /pacer {3}waited 10s/);
    assert.match(text, /fleet {3}h__m 6/);
    assert.match(text, /ETA {5}done/);
  });

  it("watch follows a live run and exits when it finishes", async () => {
    await plane.kv.progress.put(ProgressKeys.run("live"), runKey({ run: "live" }));
    const child: ChildProcess = spawn(
      process.execPath,
      ["--import", "tsx", "cli/main.ts", "watch", "live", "--json", "--interval-ms", "100"],
      { cwd: ROOT, env: env() },
    );
    let out = "";
    child.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    const deadline = Date.now() + 30_000;
    while (!out.includes("\n") && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    assert.match(out, /"phase":"running"/);
    await plane.kv.progress.put(
      ProgressKeys.run("live"),
      runKey({ run: "live", phase: "finished", completed: 3, running: 0, pending: 0 }),
    );
    assert.equal(await exited, 0);
    const last = JSON.parse(out.trimEnd().split("\n").at(-1)!) as { phase: string; completed: number };
    assert.deepEqual([last.phase, last.completed], ["finished", 3]);
  });

  it("watch of an unknown run exits non-zero and says how to list runs", async () => {
    await assert.rejects(cli(["watch", "nope", "--once"]), (err: { code: number; stderr: string }) => {
      assert.equal(err.code, 1);
      assert.match(err.stderr, /run "nope" has no progress .* List runs with: evalfleet status/);
      return true;
    });
  });

  it("gateway preflight: the seed's message with the port and a remedy that starts the whole plane; --no-check-gateway skips it", async () => {
    const port = await freePort();
    const gw = { EVALFLEET_GATEWAY_URL: `http://127.0.0.1:${port}` };
    await assert.rejects(cli(["submit", SAMPLE], gw), (err: { code: number; stderr: string }) => {
      assert.equal(err.code, 1);
      assert.equal(
        err.stderr,
        `Gateway is NOT reachable on 127.0.0.1:${port}.\nStart the plane (its gateway included) in another terminal with:\n` +
          `  evalfleet up --gateway-port ${port}\n` +
          "Then re-run this command (or set EVALFLEET_GATEWAY_URL to a plane's gateway elsewhere).\n",
      );
      return true;
    });
    // Skipped: the submission goes out, and (no planner here) times out waiting for the verdict instead.
    await assert.rejects(
      cli(["submit", SAMPLE, "--no-check-gateway", "--timeout-ms", "300"], gw),
      (err: { stderr: string }) => {
        assert.doesNotMatch(err.stderr, /Gateway is NOT reachable/);
        assert.match(err.stderr, /is the planner running\?/);
        return true;
      },
    );
  });

  it("checkGateway: any HTTP answer is reachable; a closed port is not", async () => {
    const server: Server = createServer((_req, res) => {
      res.writeHead(401);
      res.end();
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
    const port = (server.address() as AddressInfo).port;
    try {
      assert.deepEqual(await checkGateway(`http://127.0.0.1:${port}`), { ok: true, host: "127.0.0.1", port });
    } finally {
      server.close();
    }
    const closed = await freePort();
    const r = await checkGateway(`http://127.0.0.1:${closed}/`);
    assert.equal(r.ok, false);
    assert.equal(r.message, gatewayUnreachableMessage("127.0.0.1", closed));
    await assert.rejects(checkGateway("not a url"), /is not a URL/);
  });
});
