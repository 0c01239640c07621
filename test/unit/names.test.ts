import assert from "node:assert/strict";
import path from "node:path";
import { describe, it } from "node:test";
import { validateKey } from "@nats-io/kv/internal";
import fc from "fast-check";
import {
  clientTokenFor,
  refFromTags,
  startedByFor,
  TAG_VALUE_MAX,
  tagsFor,
} from "../../actors/dispatcher/backends/ecs-ids.js";
import { gradeContainerName } from "../../actors/grader-supervisor/backends/docker.js";
import { attemptPermissions } from "../../plane/nats-auth.js";
import { EvalfleetError } from "../../protocol/errors.js";
import { MsgIds } from "../../protocol/ids.js";
import {
  attemptToken,
  decodeToken,
  encodeToken,
  NAME_PATTERN,
  nameProblem,
  safeSlug,
} from "../../protocol/names.js";
import { ApiSubjects, BlobNames, ProgressKeys, StateKeys, Subjects } from "../../protocol/subjects.js";
import { attemptDirs, repoMirrorPath } from "../../task/workdir.js";
import { hostileString } from "../helpers/hostile.js";
import { subjectMatches } from "../helpers/nats.js";

const KV_KEY = /^[-/=_A-Za-z0-9]+(\.[-/=_A-Za-z0-9]+)*$/;

describe("names become tokens safely", () => {
  it("encodeToken is reversible and yields one subject token of KV-safe characters", () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1, maxLength: 60, unit: "binary" }), (s) => {
        const t = encodeToken(s);
        assert.match(t, /^[A-Za-z0-9_=-]+$/);
        assert.equal(decodeToken(t), s);
      }),
      { numRuns: 2000 },
    );
  });

  it("hostile names never split or widen a subject or KV key", () => {
    for (const bad of [
      "..",
      "a.b",
      "*",
      ">",
      "a b",
      "x\ny",
      "\u0000",
      "ünï/cødé",
      "../../etc/passwd",
      "run.>",
    ]) {
      const subject = Subjects.ledger.one(bad, bad, 1);
      assert.equal(subject.split(".").length, 4, subject);
      assert.ok(!/[*> \n\u0000]/.test(subject), subject);
      assert.match(ProgressKeys.cell(bad, bad), KV_KEY);
    }
  });

  it("safeSlug yields path- and container-safe names, distinct for distinct inputs", () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 200 }),
        fc.string({ minLength: 1, maxLength: 200 }),
        (a, b) => {
          const sa = safeSlug(a);
          assert.match(sa, /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/);
          assert.ok(!sa.includes(".."));
          assert.ok(sa.length <= 120);
          if (a !== b) assert.notEqual(sa, safeSlug(b));
        },
      ),
      { numRuns: 2000 },
    );
    assert.equal(safeSlug("h__m__t__r0"), "h__m__t__r0");
  });

  it("nameProblem explains what is wrong", () => {
    assert.equal(nameProblem("claude-sonnet-4.5"), undefined);
    assert.match(nameProblem("a/b") ?? "", /contains '\/'/);
    assert.match(nameProblem("..x") ?? "", /'\.\.'/);
    assert.match(nameProblem("-x") ?? "", /must not start/);
    assert.match(nameProblem("a\u0001") ?? "", /\\x01/);
    assert.match(nameProblem("x".repeat(129)) ?? "", /limit is 128/);
  });
});

/** A reference whose every name is hostile: names reach the builders only after validation, but encoding must hold. */
const anyName = () =>
  fc
    .oneof(hostileString(), fc.string({ minLength: 1, maxLength: 130, unit: "binary" }))
    .filter((s) => s !== "");
const attempt = fc.integer({ min: 0, max: 1_000_000 });
const TOKEN = /^[A-Za-z0-9_=-]+$/;
const ECS_TAG_VALUE = /^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$/u;
const DOCKER_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]+$/;

function assertSubject(subject: string, tokens: number, within: string): void {
  const parts = subject.split(".");
  assert.equal(parts.length, tokens, subject);
  for (const t of parts) assert.ok(t.length > 0 && !/[\s*>\u0000-\u001f\u007f]/.test(t), subject);
  assert.ok(subjectMatches(within, subject), `${subject} not within ${within}`);
}

function assertKey(key: string, tokens: number): void {
  assert.doesNotThrow(() => validateKey(key), key);
  assert.equal(key.split(".").length, tokens, key);
  assert.ok(
    key.split(".").every((t) => t.length > 0),
    key,
  );
}

describe("every place a name becomes a subject, key, object name, path or container name (property-based)", () => {
  it("names that reach the encoders are only the valid ones, and those that are refused say why", () => {
    fc.assert(
      fc.property(anyName(), (n) => {
        const problem = nameProblem(n);
        if (problem === undefined) assert.match(n, NAME_PATTERN);
        else assert.ok(problem.length > 10);
      }),
      { numRuns: 3000 },
    );
    for (const bad of ["__proto__", "constructor", "toString", "..", "a/b", "a b", "*", ">", "x\u0000"])
      assert.ok(nameProblem(bad), bad);
  });

  it("subjects: one token per name, inside the wildcard their stream or consumer listens on", () => {
    fc.assert(
      fc.property(anyName(), anyName(), attempt, (run, cell, n) => {
        assertSubject(Subjects.events.run(run), 2, Subjects.events.all);
        assertSubject(Subjects.cells.one(run, cell), 3, Subjects.cells.run(run));
        assertSubject(Subjects.cells.one(run, cell), 3, Subjects.cells.all);
        assertSubject(Subjects.attempts.one(run, cell, n), 4, Subjects.attempts.all);
        assertSubject(Subjects.attempts.one(run, cell, n), 4, Subjects.attempts.run(run));
        assertSubject(Subjects.ledger.one(run, cell, n), 4, Subjects.ledger.run(run));
        assertSubject(Subjects.gradeJobs.one(run), 3, Subjects.gradeJobs.all);
        assertSubject(Subjects.gradeResults.one(run), 3, Subjects.gradeResults.all);
        assertSubject(Subjects.judgeJobs.one(run), 3, Subjects.judgeJobs.all);
        assertSubject(Subjects.judgeResults.one(run), 3, Subjects.judgeResults.all);
        assertSubject(Subjects.control.one(run, "cancel"), 3, Subjects.control.all);
        assertSubject(Subjects.attemptSignal(run, cell, n), 4, "signal.>");
        // another run's or cell's subject never falls inside this one's wildcard
        if (run !== cell)
          assert.ok(!subjectMatches(Subjects.ledger.run(run), Subjects.ledger.one(cell, run, n)));
      }),
      { numRuns: 2000 },
    );
  });

  it("KV keys: valid for the KV client, one segment per name", () => {
    fc.assert(
      fc.property(anyName(), anyName(), attempt, (run, cell, n) => {
        assertKey(ProgressKeys.run(run), 2);
        assertKey(ProgressKeys.cell(run, cell), 3);
        assertKey(ProgressKeys.pool(run, cell), 3);
        assertKey(ProgressKeys.actor(run, cell), 3);
        assertKey(StateKeys.budget(run), 2);
        assertKey(StateKeys.job(run, cell), 3);
        assertKey(StateKeys.jobRun(run), 2);
        assertKey(StateKeys.jobTask(run, cell), 3);
        assertKey(StateKeys.control(run), 2);
        assertKey(StateKeys.claim(run, cell, n), 4);
        assertKey(StateKeys.cellLaunch(run, cell), 3);
        assertKey(StateKeys.pacerPool(cell), 2);
      }),
      { numRuns: 2000 },
    );
  });

  it("object names: run/cell/attempt/file, each segment a token, never climbing", () => {
    fc.assert(
      fc.property(anyName(), anyName(), attempt, (run, cell, n) => {
        const name = BlobNames.attempt(run, cell, n, "trajectory.jsonl");
        const parts = name.split("/");
        assert.equal(parts.length, 4, name);
        assert.match(parts[0]!, TOKEN);
        assert.match(parts[1]!, TOKEN);
        assert.equal(parts[2], String(n));
        assert.equal(parts[3], "trajectory.jsonl");
      }),
      { numRuns: 1000 },
    );
  });

  it("an empty name is refused by the encoders, and a slug is never empty", () => {
    assert.throws(
      () => Subjects.ledger.one("", "c", 1),
      (e: unknown) => e instanceof EvalfleetError,
    );
    assert.throws(
      () => StateKeys.job("r", ""),
      (e: unknown) => e instanceof EvalfleetError,
    );
    assert.match(safeSlug(""), /^_-[0-9a-f]{8}$/);
  });

  it("attempt numbers that would split or bend a token are refused by every builder", () => {
    for (const bad of [1.5, -1, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 60]) {
      for (const build of [
        () => attemptToken(bad),
        () => Subjects.attemptSignal("r", "c", bad),
        () => StateKeys.claim("r", "c", bad),
        () => BlobNames.attempt("r", "c", bad, "patch.diff"),
        () => attemptDirs("/w", { run: "r", cell: "c", attempt: bad }),
      ])
        assert.throws(build, (e: unknown) => e instanceof EvalfleetError, String(bad));
    }
  });

  it("workdirs and mirrors stay inside their root, one folder per run, cell and attempt", () => {
    const root = "/work/evalfleet-work";
    fc.assert(
      fc.property(anyName(), anyName(), attempt, anyName(), (run, cell, n, repo) => {
        const d = attemptDirs(root, { run, cell, attempt: n });
        const rel = path.relative(root, d.attemptDir);
        assert.ok(!rel.startsWith("..") && !path.isAbsolute(rel), rel);
        assert.equal(rel.split(path.sep).length, 3, rel);
        for (const sub of [d.harnessRoot, d.taskDir]) assert.equal(path.dirname(sub), d.attemptDir);
        for (const sub of [d.repo, d.home, d.out]) assert.equal(path.dirname(sub), d.harnessRoot);
        assert.equal(path.dirname(d.baseGitDir), d.taskDir);
        assert.equal(path.dirname(repoMirrorPath("/mirrors", repo)), "/mirrors", repo);
      }),
      { numRuns: 2000 },
    );
    // distinct cells never share a folder, even when their slugs would
    assert.notEqual(
      attemptDirs(root, { run: "r", cell: "a/b", attempt: 0 }).cellDir,
      attemptDirs(root, { run: "r", cell: "a_b", attempt: 0 }).cellDir,
    );
  });

  it("container names and ECS identifiers fit their alphabets and limits, and tags give the reference back", () => {
    fc.assert(
      fc.property(
        fc.oneof(anyName(), fc.string({ minLength: 300, maxLength: 400 })),
        fc.oneof(anyName(), fc.constant(`${"h".repeat(128)}__${"m:".repeat(64)}__${"t.".repeat(60)}t__r999`)),
        attempt,
        anyName(),
        (runName, cellId, n, pool) => {
          const container = gradeContainerName(cellId);
          assert.match(container, DOCKER_NAME);
          assert.ok(container.length <= 128, container);
          const ref = { runName, cellId, attempt: n, pool };
          const tags = tagsFor(ref);
          // ECS allows 50 tags. Names are at most 128 characters (nameProblem), so a real reference needs a dozen at
          // most; longer hostile strings still round-trip below, in more tags.
          if (runName.length <= 128 && pool.length <= 2 * 128 + 2)
            assert.ok(tags.length <= 40, `${tags.length} tags`);
          for (const t of tags) {
            assert.ok(t.key.length <= 128 && t.value.length <= TAG_VALUE_MAX, t.key);
            assert.match(t.value, ECS_TAG_VALUE);
          }
          assert.deepEqual(refFromTags(tags), ref);
          assert.match(startedByFor(runName), /^[A-Za-z0-9_-]{1,128}$/);
          assert.ok(clientTokenFor(ref).length <= 64);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it("a task's NATS user and inbox are single tokens, and its permissions name only its own subjects", () => {
    fc.assert(
      fc.property(anyName(), anyName(), attempt, (run, cell, n) => {
        const t = { run, cell, attempt: n, task: cell };
        const inbox = ApiSubjects.attemptInbox(run, cell, n);
        assert.match(inbox, /^_INBOX_ATTEMPT(\.[A-Za-z0-9_=-]+){3}$/);
        const perms = attemptPermissions(t);
        const chunks = ApiSubjects.objectChunks("blobs", ApiSubjects.attemptChunkId(run, cell, n, "*"));
        for (const s of perms.publish) assert.ok(s === chunks || !/[*>]/.test(s), s);
        for (const s of perms.subscribe) assert.ok(s === `${inbox}.>` || !/[*>]/.test(s), s);
      }),
      { numRuns: 500 },
    );
  });

  it("message ids of admitted names are one per attempt and per kind (the task and the stand-in result share one)", () => {
    // few short names that run into each other when joined, so that equal and nearly equal pairs come up often
    const admitted = fc.constantFrom("a", "b", "aa", "ab", "a.b", "a_", "_a", "a:b", "a@b", "a+");
    const few = fc.integer({ min: 0, max: 5 });
    fc.assert(
      fc.property(admitted, admitted, few, admitted, admitted, few, (r1, c1, n1, r2, c2, n2) => {
        for (const n of [r1, c1, r2, c2]) assert.equal(nameProblem(n), undefined, n);
        const same = r1 === r2 && c1 === c2 && n1 === n2;
        assert.equal(
          MsgIds.attemptResult(r1, c1, n1) === MsgIds.attemptResult(r2, c2, n2),
          same,
          `${r1} ${c1} ${n1}`,
        );
        const kinds = [MsgIds.attemptResult, MsgIds.grade, MsgIds.judgeJob, MsgIds.verdict].map((b) =>
          b(r1, c1, n1),
        );
        assert.equal(new Set(kinds).size, kinds.length);
        assert.equal(MsgIds.cellWork(r1, c1, n1) === MsgIds.cellWork(r2, c2, n2), same);
      }),
      // a run and cell that join into the same text as another pair's
      { numRuns: 2000, examples: [["a", "ab", 1, "aa", "b", 1]] },
    );
  });
});
