/**
 * The eval script the official harness runs in the instance container (test_spec/{python,javascript,utils}.py):
 * reset the test files, apply the test patch, run the repository's test command between the start and
 * end markers, reset again. `set -uxo pipefail` without -e: the final reset must run even after failures.
 */
import { ErrorCode, ValidationError } from "../protocol/errors.js";
import { END_TEST_OUTPUT, HEREDOC_DELIMITER, START_TEST_OUTPUT } from "./constants.js";
import { modifiedFiles, patchedFiles, patchedPath, testDirectives } from "./diff.js";
import type { GradingInstance } from "./instance.js";
import type { VersionSpec } from "./spec-types.js";
import { repoExt, specFor } from "./specs.js";

const ENV_NAME = "testbed";
const REPO_DIR = `/${ENV_NAME}`;

type EvalInstance = GradingInstance & { version: string; base_commit: string; test_patch: string };

function requireEvalFields(instance: GradingInstance): EvalInstance {
  const issues = [];
  if (!instance.version) issues.push({ path: "version", reason: "required to pick the test command" });
  if (!instance.base_commit) issues.push({ path: "base_commit", reason: "required to reset test files" });
  if (instance.test_patch === undefined) issues.push({ path: "test_patch", reason: "required" });
  if (issues.length > 0) {
    throw new ValidationError(
      ErrorCode.InvalidMessage,
      `cannot build the eval script for ${instance.instance_id}`,
      issues,
    );
  }
  return instance as EvalInstance;
}

function testCmds(spec: VersionSpec): string[] {
  if (spec.testCmd === undefined) return [];
  return typeof spec.testCmd === "string" ? [spec.testCmd] : spec.testCmd;
}

/**
 * `shlex.quote`: a word the shell reads back as exactly `s`. Words made only of characters no shell treats
 * specially stay as they are, so every normal path prints exactly as the official script prints it; anything else
 * (a space, a quote, `$(…)`, a backtick, `;`) is single-quoted. File names come from the test patch's diff headers,
 * which a task file (or a dataset record) chooses.
 */
export function shellWord(s: string): string {
  if (s.includes("\0"))
    throw new ValidationError(ErrorCode.InvalidMessage, "a path in the test patch holds a NUL byte", [
      { path: "test_patch", reason: "diff headers name files; a file name cannot contain NUL" },
    ]);
  if (s === "") return "''";
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(s)) return s;
  return `'${s.replaceAll("'", `'"'"'`)}'`;
}

function words(list: readonly string[]): string {
  return list.map(shellWord).join(" ");
}

/**
 * The heredoc delimiter for `body`: the official one, unless a line of the body is exactly that word (which would
 * end the heredoc early and run the rest of the patch as commands); then the first numbered variant no line of the
 * body equals.
 */
export function heredocDelimiter(body: string): string {
  const lines = new Set(body.split("\n"));
  let d = HEREDOC_DELIMITER;
  for (let n = 1; lines.has(d); n++) d = `${HEREDOC_DELIMITER}_${n}`;
  return d;
}

function applyTestPatch(flags: string, testPatch: string): string {
  const d = heredocDelimiter(testPatch);
  return `git apply ${flags} - <<'${d}'\n${testPatch}\n${d}`;
}

/** make_eval_script_list_py. */
function pythonCommands(inst: EvalInstance, spec: VersionSpec): string[] {
  // An empty file list still yields "git checkout <sha> " (trailing space), as the official join does.
  const reset = `git checkout ${shellWord(inst.base_commit)} ${words(modifiedFiles(inst.test_patch))}`;
  const testCommand = [
    spec.testCmd as string,
    ...testDirectives(inst.repo, inst.test_patch).map(shellWord),
  ].join(" ");
  const cmds = ["source /opt/miniconda3/bin/activate", `conda activate ${ENV_NAME}`, `cd ${REPO_DIR}`];
  if (spec.evalCommands) cmds.push(...spec.evalCommands);
  cmds.push(
    `git config --global --add safe.directory ${REPO_DIR}`,
    `cd ${REPO_DIR}`,
    "git status",
    "git show",
    `git -c core.fileMode=false diff ${shellWord(inst.base_commit)}`,
    "source /opt/miniconda3/bin/activate",
    `conda activate ${ENV_NAME}`,
  );
  if (spec.install !== undefined) cmds.push(spec.install);
  cmds.push(
    reset,
    applyTestPatch("-v", inst.test_patch),
    `: '${START_TEST_OUTPUT}'`,
    testCommand,
    `: '${END_TEST_OUTPUT}'`,
    reset,
  );
  return cmds;
}

/** make_eval_script_list_common (C, Go, Java, PHP, Ruby, Rust; and the base of JS). */
function commonCommands(inst: EvalInstance, spec: VersionSpec): string[] {
  const files = modifiedFiles(inst.test_patch);
  const reset =
    files.length > 0
      ? `git checkout ${shellWord(inst.base_commit)} ${words(files)}`
      : 'echo "No test files to reset"';
  return [
    `cd ${REPO_DIR}`,
    `git config --global --add safe.directory ${REPO_DIR}`,
    `cd ${REPO_DIR}`,
    reset,
    applyTestPatch("--verbose --reject", inst.test_patch),
    ...(spec.build ?? []),
    `: '${START_TEST_OUTPUT}'`,
    ...testCmds(spec),
    `: '${END_TEST_OUTPUT}'`,
    reset,
  ];
}

interface ImageAsset {
  path: string;
  url: string;
}

function imageDownloadCommands(inst: EvalInstance): string[] {
  let assets: unknown = inst.image_assets ?? {};
  if (typeof assets === "string") assets = JSON.parse(assets);
  const list = ((assets as { test_patch?: ImageAsset[] }).test_patch ?? []) as ImageAsset[];
  return list.flatMap((a) => {
    const slash = a.path.lastIndexOf("/");
    const folder = slash === -1 ? "." : a.path.slice(0, slash) || "/";
    return [
      `mkdir -p ${shellWord(folder)}`,
      `curl -o ${shellWord(a.path)} ${shellWord(a.url)}`,
      `chmod 777 ${shellWord(a.path)}`,
    ];
  });
}

const CALYPSO_JSON_CONFIG = [
  "6.11.5",
  "8.9.1",
  "8.9.3",
  "8.9.4",
  "8.11.0",
  "8.11.2",
  "10.4.1",
  "10.5.0",
  "10.6.0",
  "10.9.0",
];
const CALYPSO_JS_CONFIG = ["10.10.0", "10.12.0", "10.13.0", "10.14.0", "10.15.2", "10.16.3"];

/** get_test_cmds_calypso: one jest/npm command per touched test path. */
function calypsoTestCommands(inst: EvalInstance): string[] {
  const cmds: string[] = [];
  for (const f of patchedFiles(inst.test_patch)) {
    let p = patchedPath(f);
    if (/__snapshots__\/[^\n]*.js.snap$/u.test(p)) p = p.split("/").slice(0, -2).join("/");
    if (p.startsWith("client") || p.startsWith("packages")) {
      const pkg = p.split("/")[0];
      // The official command single-quotes the path always; a quote inside it must not end the word.
      const quoted = `'${p.replaceAll("'", `'"'"'`)}'`;
      if (CALYPSO_JS_CONFIG.includes(inst.version)) {
        cmds.push(
          `./node_modules/.bin/jest --verbose ${shellWord(`-c=test/${pkg}/jest.config.js`)} ${quoted}`,
        );
      } else if (CALYPSO_JSON_CONFIG.includes(inst.version)) {
        cmds.push(
          `./node_modules/.bin/jest --verbose ${shellWord(`-c=test/${pkg}/jest.config.json`)} ${quoted}`,
        );
      } else {
        cmds.push(`npm run ${shellWord(`test-${pkg}`)} --verbose ${quoted}`);
      }
    } else if (p.startsWith("test/e2e")) {
      cmds.push("cd test/e2e", `NODE_CONFIG_ENV=test npm run test ${shellWord(p)}`, "cd ../..");
    }
  }
  return cmds;
}

/** make_eval_script_list_js: common flow, image downloads after the reset, calypso's own commands. */
function javascriptCommands(inst: EvalInstance, spec: VersionSpec): string[] {
  const cmds = commonCommands(inst, spec);
  cmds.splice(4, 0, ...imageDownloadCommands(inst));
  if (inst.repo === "Automattic/wp-calypso") {
    const start = cmds.indexOf(`: '${START_TEST_OUTPUT}'`);
    const end = cmds.indexOf(`: '${END_TEST_OUTPUT}'`);
    cmds.splice(start + 1, end - start - 1, ...calypsoTestCommands(inst));
  }
  return cmds;
}

/** The eval script's command list for an instance, per its repository's language. */
export function makeEvalScriptList(instance: GradingInstance): string[] {
  const inst = requireEvalFields(instance);
  const spec = specFor(inst.repo, inst.version);
  const ext = repoExt(inst.repo);
  if (ext === "py") return pythonCommands(inst, spec);
  if (ext === "js") return javascriptCommands(inst, spec);
  return commonCommands(inst, spec);
}

/** TestSpec.eval_script: the file copied to /eval.sh and run with /bin/bash. */
export function makeEvalScript(instance: GradingInstance): string {
  return `${["#!/bin/bash", "set -uxo pipefail", ...makeEvalScriptList(instance)].join("\n")}\n`;
}

/**
 * The same flow for the local backend: no conda, no /testbed — the checkout directory instead. The test
 * command is the task's own (evalfleet's repository tasks) or the official one with its directives.
 */
export function makeLocalEvalScript(
  instance: GradingInstance,
  opts: { repoDir: string; testCmd?: string },
): string {
  const inst = requireEvalFields({ ...instance, version: instance.version ?? "local" });
  const files = modifiedFiles(inst.test_patch);
  const reset =
    files.length > 0
      ? `git checkout ${shellWord(inst.base_commit)} -- ${words(files)}`
      : 'echo "No test files to reset"';
  let testCommand = opts.testCmd;
  if (testCommand === undefined) {
    const spec = specFor(inst.repo, instance.version);
    testCommand = [...testCmds(spec), ...testDirectives(inst.repo, inst.test_patch).map(shellWord)].join(" ");
  }
  const cmds = [
    `cd ${shellWord(opts.repoDir)}`,
    `git -c core.fileMode=false diff ${shellWord(inst.base_commit)}`,
    reset,
    ...(inst.test_patch.trim() === "" ? [] : [applyTestPatch("-v", inst.test_patch)]),
    `: '${START_TEST_OUTPUT}'`,
    testCommand,
    `: '${END_TEST_OUTPUT}'`,
    reset,
  ];
  return `${["#!/bin/bash", "set -uxo pipefail", ...cmds].join("\n")}\n`;
}
