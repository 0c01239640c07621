import assert from "node:assert/strict";
import { chmod, mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { harnessVersionProblem, installedCliVersion, versionMatches } from "../../harnesses/common.js";
import { RunConfigSchema } from "../../protocol/config.js";

test("version pins: a prefix pins a series, a full version pins exactly", () => {
  assert.ok(versionMatches("2.1", "2.1.197"));
  assert.ok(versionMatches("v2.1.197", "2.1.197"));
  assert.ok(!versionMatches("2.1", "2.10.0"));
  assert.ok(!versionMatches("2.1.19", "2.1.197"));
});

test("harness.version is checked against the CLI an attempt would run", async () => {
  const installed = installedCliVersion("claude-code", {});
  assert.match(installed ?? "", /^\d+\.\d+\.\d+/, "the shipped Claude Code package has a version");
  const series = (installed ?? "").split(".").slice(0, 2).join(".");
  assert.equal(harnessVersionProblem("claude-code", series, {}), null);
  assert.equal(harnessVersionProblem("claude-code", undefined, {}), null);
  const wrong = harnessVersionProblem("claude-code", "0.9", {});
  assert.match(
    wrong ?? "",
    new RegExp(`pinned but claude-code ${installed?.replace(/\./g, "\\.")} is installed`),
  );
  assert.match(wrong ?? "", /install @anthropic-ai\/claude-code@0\.9/);
  // a CLI of one's own (settings.bin): its --version
  const dir = await mkdtemp(join(tmpdir(), "ef-ver-"));
  const bin = join(dir, "my-cli");
  await writeFile(bin, "#!/bin/sh\necho 'my-cli 3.4.5 (build abc)'\n");
  await chmod(bin, 0o755);
  assert.equal(installedCliVersion("codex", { bin }), "3.4.5");
  assert.equal(harnessVersionProblem("codex", "3.4", { bin }), null);
  assert.match(harnessVersionProblem("codex", "3.5", { bin }) ?? "", /3\.4\.5 is installed/);
});

test("harness.version on an adapter with no CLI to pin is refused at plan time, with the path", () => {
  const r = RunConfigSchema.safeParse({
    name: "v",
    harnesses: [{ name: "cmd", adapter: "command", version: "1" }],
    models: [{ name: "claude-sonnet-4-5" }],
    tasks: ["*"],
  });
  assert.equal(r.success, false);
  const issue = r.success ? undefined : r.error.issues[0];
  assert.deepEqual(issue?.path, ["harnesses", 0, "version"]);
  assert.match(issue?.message ?? "", /no CLI whose version could be pinned/);
});
