/**
 * The eval script under hostile test patches: file names in diff headers and lines in patch bodies chosen to break
 * out of the script (`$(…)`, backticks, quotes, `;`, the heredoc delimiter on a line of its own). Each generated
 * script is run by bash with PATH holding only recording stubs, and must hand every command exactly the words
 * grading derived from the patch, feed `git apply` exactly the patch, and run nothing the patch names.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import fc from "fast-check";
import { HEREDOC_DELIMITER } from "../../grading/constants.js";
import { modifiedFiles, testDirectives } from "../../grading/diff.js";
import {
  heredocDelimiter,
  makeEvalScript,
  makeLocalEvalScript,
  shellWord,
} from "../../grading/eval-script.js";
import type { GradingInstance } from "../../grading/instance.js";

const BASE = "0123456789abcdef0123456789abcdef01234567";
let work: string;
let stubs: string;

/** Every stub logs its name and argv (NUL-separated, one record per line of the log); git apply keeps its stdin. */
const STUB = `#!/bin/bash
n=$(( $(/bin/cat "$EF_LOG.count" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$EF_LOG.count"
{ printf '%s\\0' "$(/usr/bin/basename "$0")" "$@"; printf '\\n'; } >> "$EF_LOG.$n"
if [ "$(/usr/bin/basename "$0")" = git ] && [ "$1" = apply ]; then /bin/cat > "$EF_LOG.$n.stdin"; fi
if [ "$(/usr/bin/basename "$0")" = touch ]; then echo INJECTED >> "$EF_LOG.injected"; fi
exit 0
`;
const STUBBED = ["git", "pytest", "touch", "make", "npm", "curl", "chmod", "mkdir", "id", "rm", "sh"];

before(() => {
  work = mkdtempSync(path.join(tmpdir(), "ef-hostile-eval-"));
  stubs = path.join(work, "bin");
  spawnSync("/bin/mkdir", ["-p", stubs]);
  for (const name of STUBBED) {
    writeFileSync(path.join(stubs, name), STUB);
    chmodSync(path.join(stubs, name), 0o755);
  }
});

after(() => {
  rmSync(work, { recursive: true, force: true });
});

interface Call {
  argv: string[];
  stdin?: string;
}

/** Run a script with only the stubs on PATH, in a scratch folder; the calls it made, in order. */
function runScript(script: string): { calls: Call[]; injected: boolean } {
  const dir = mkdtempSync(path.join(work, "run-"));
  const log = path.join(dir, "log");
  const file = path.join(dir, "eval.sh");
  writeFileSync(file, script);
  const r = spawnSync("/bin/bash", [file], {
    cwd: dir,
    env: { PATH: stubs, EF_LOG: log, HOME: dir },
    encoding: "utf8",
    timeout: 20_000,
  });
  assert.equal(r.error, undefined, String(r.error));
  const count = Number(existsSync(`${log}.count`) ? readFileSync(`${log}.count`, "utf8").trim() : 0);
  const calls: Call[] = [];
  for (let i = 1; i <= count; i++) {
    const raw = readFileSync(`${log}.${i}`, "utf8").replace(/\n$/, "");
    const argv = raw.split("\0").slice(0, -1);
    const call: Call = { argv };
    if (existsSync(`${log}.${i}.stdin`)) call.stdin = readFileSync(`${log}.${i}.stdin`, "utf8");
    calls.push(call);
  }
  const injected = existsSync(`${log}.injected`) || readdirSync(dir).some((f) => f.startsWith("PWNED"));
  rmSync(dir, { recursive: true, force: true });
  return { calls, injected };
}

// Pieces hostile names and lines are made of: shell syntax, quotes, command substitutions that would run the
// `touch` stub (or create a PWNED file) if the shell ever read them as code.
const HOSTILE = [
  "$(touch PWNED1)",
  "`touch PWNED2`",
  "';touch PWNED3;'",
  '";touch PWNED4;"',
  "; touch PWNED5",
  "&& touch PWNED6",
  "| touch PWNED7",
  "> PWNED8",
  "$HOME",
  "$IFS",
  "*",
  "?",
  "\\",
  "'",
  '"',
  " ",
  "\r",
  "!",
  "#",
  "~",
  "{a,b}",
  "-rf",
  "é",
];
const SAFE = "abcxyz019_.-/".split("");
const namePart = fc.oneof(fc.constantFrom(...HOSTILE), fc.constantFrom(...SAFE));
/** A path as a diff header carries it: no tab or newline (they end the name), not empty. */
const hostileName = fc
  .array(namePart, { minLength: 1, maxLength: 8 })
  .map((parts) => `t/${parts.join("")}.py`)
  .filter((n) => !/[\t\n\0]/.test(n) && !n.includes(" b/"));

const bodyLine = fc.oneof(
  fc.constantFrom(
    HEREDOC_DELIMITER,
    `${HEREDOC_DELIMITER}_1`,
    `${HEREDOC_DELIMITER}_2`,
    "EOF",
    "touch PWNED9",
    "$(touch PWNED10)",
    "'",
  ),
  fc.array(namePart, { maxLength: 6 }).map((p) => p.join("")),
);

/**
 * A test patch naming `names`, each file with a hunk whose lines are the generated (possibly hostile) body, then
 * the same lines raw, as commentary between files (git apply skips it; the heredoc must carry it unchanged).
 */
function testPatch(names: string[], bodies: string[][], directive: string | null): string {
  const out: string[] = [];
  names.forEach((name, i) => {
    const body = (bodies[i] ?? []).filter((l) => !l.includes("\n"));
    out.push(`diff --git a/${name} b/${name}`, `--- a/${name}`, `+++ b/${name}`);
    out.push(`@@ -1,${body.length + 1} +1,${body.length + 1} @@`, " context");
    for (const l of body) out.push(` ${l}`);
    out.push(...body);
  });
  // A line in another file's body that looks like a diff header: the official directive regex reads it anyway.
  if (directive !== null) out.push(`diff --git a/x b/${directive}`);
  return `${out.join("\n")}\n`;
}

const patchArb = fc
  .tuple(
    fc.array(hostileName, { minLength: 1, maxLength: 3 }),
    fc.array(fc.array(bodyLine, { maxLength: 6 }), { maxLength: 3 }),
    fc.option(hostileName, { nil: null }),
  )
  .map(([names, bodies, directive]) => testPatch(names, bodies, directive));

function instance(repo: string, version: string, patch: string): GradingInstance {
  return {
    instance_id: "hostile__case-1",
    repo,
    version,
    FAIL_TO_PASS: [],
    PASS_TO_PASS: [],
    base_commit: BASE,
    test_patch: patch,
  };
}

const calls = (all: Call[], name: string, first?: string) =>
  all.filter((c) => c.argv[0] === name && (first === undefined || c.argv[1] === first));

describe("eval script with hostile diff headers and patch bodies", () => {
  it("python flavour: exact words to git checkout and pytest, the exact patch to git apply, nothing injected", () => {
    fc.assert(
      fc.property(patchArb, (patch) => {
        const script = makeEvalScript(instance("astropy/astropy", "5.0", patch));
        const { calls: made, injected } = runScript(script);
        assert.equal(injected, false, script);
        const files = modifiedFiles(patch);
        const checkouts = calls(made, "git", "checkout");
        assert.equal(checkouts.length, 2, script);
        for (const c of checkouts) assert.deepEqual(c.argv.slice(1), ["checkout", BASE, ...files]);
        const applies = calls(made, "git", "apply");
        assert.equal(applies.length, 1);
        assert.deepEqual(applies[0]?.argv.slice(1), ["apply", "-v", "-"]);
        assert.equal(applies[0]?.stdin, `${patch}\n`);
        const tests = calls(made, "pytest");
        assert.equal(tests.length, 1);
        assert.deepEqual(tests[0]?.argv.slice(1), ["-rA", ...testDirectives("astropy/astropy", patch)]);
        assert.equal(calls(made, "touch").length, 0);
      }),
      { numRuns: 60 },
    );
  });

  it("common flavour (C): the same for the reset, the --reject apply and the build", () => {
    fc.assert(
      fc.property(patchArb, (patch) => {
        const script = makeEvalScript(instance("redis/redis", "13115", patch));
        const { calls: made, injected } = runScript(script);
        assert.equal(injected, false, script);
        for (const c of calls(made, "git", "checkout"))
          assert.deepEqual(c.argv.slice(1), ["checkout", BASE, ...modifiedFiles(patch)]);
        const applies = calls(made, "git", "apply");
        assert.deepEqual(applies[0]?.argv.slice(1), ["apply", "--verbose", "--reject", "-"]);
        assert.equal(applies[0]?.stdin, `${patch}\n`);
        assert.equal(calls(made, "make").length, 2);
        assert.equal(calls(made, "touch").length, 0);
      }),
      { numRuns: 40 },
    );
  });

  it("calypso: one jest or npm command per touched path, the path one word", () => {
    const calypsoName = hostileName.map((n) => `client/${n}`);
    fc.assert(
      fc.property(fc.array(calypsoName, { minLength: 1, maxLength: 2 }), (names) => {
        const patch = testPatch(names, [], null);
        const script = makeEvalScript({
          ...instance("Automattic/wp-calypso", "0.8", patch),
          image_assets: JSON.stringify({ test_patch: [{ path: names[0], url: "https://x/$(touch PWNED)" }] }),
        });
        const { calls: made, injected } = runScript(script);
        assert.equal(injected, false, script);
        const npm = calls(made, "npm");
        assert.equal(npm.length, names.length, script);
        npm.forEach((c, i) => {
          assert.equal(c.argv.at(-1), names[i]);
        });
        assert.deepEqual(calls(made, "curl")[0]?.argv.slice(1), ["-o", names[0], "https://x/$(touch PWNED)"]);
      }),
      { numRuns: 30 },
    );
  });

  it("local script: the checkout folder and the reset are single words too", () => {
    fc.assert(
      fc.property(patchArb, (patch) => {
        const script = makeLocalEvalScript(instance("evalfleet/x", "local", patch), {
          repoDir: ".",
          testCmd: "pytest -q",
        });
        const { calls: made, injected } = runScript(script);
        assert.equal(injected, false, script);
        for (const c of calls(made, "git", "checkout"))
          assert.deepEqual(c.argv.slice(1), ["checkout", BASE, "--", ...modifiedFiles(patch)]);
        assert.equal(calls(made, "git", "apply")[0]?.stdin, `${patch}\n`);
      }),
      { numRuns: 30 },
    );
  });
});

describe("the quoting keeps normal names byte-identical", () => {
  it("safe words stay bare; anything else is one single-quoted word", () => {
    assert.equal(shellWord("tests/test_x.py"), "tests/test_x.py");
    assert.equal(shellWord("a b"), "'a b'");
    assert.equal(shellWord("it's"), `'it'"'"'s'`);
    assert.equal(shellWord(""), "''");
    assert.throws(() => shellWord("a\0b"), /NUL/);
  });

  it("the heredoc delimiter is the official one unless a line of the patch is exactly it", () => {
    assert.equal(heredocDelimiter("+x\n"), HEREDOC_DELIMITER);
    assert.equal(heredocDelimiter(` ${HEREDOC_DELIMITER}\n`), HEREDOC_DELIMITER);
    assert.equal(heredocDelimiter(`${HEREDOC_DELIMITER}\n`), `${HEREDOC_DELIMITER}_1`);
    assert.equal(
      heredocDelimiter(`${HEREDOC_DELIMITER}\n${HEREDOC_DELIMITER}_1\n`),
      `${HEREDOC_DELIMITER}_2`,
    );
  });
});
