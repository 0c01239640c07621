/** What the harness reads from a test patch: the files it touches (unidiff PatchSet) and test directives. */
import { NON_TEST_EXTS } from "./constants.js";

export interface PatchedFile {
  source: string;
  target: string;
}

const GIT_HEADER = /^diff --git (a\/[^\t\n]+) (b\/[^\t\n]+)/;
const SOURCE = /^--- ([^\t\n]+)/;
const TARGET = /^\+\+\+ ([^\t\n]+)/;
const HUNK = /^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@/;

/**
 * The files of a unified diff with their source and target names, in order, as unidiff's PatchSet
 * sees them: a git header opens a file, `---`/`+++` name it, and hunk bodies are skipped by their line
 * counts so that a removed line starting with "-- " is never taken for a header.
 */
export function patchedFiles(patch: string): PatchedFile[] {
  const files: PatchedFile[] = [];
  let current: PatchedFile | null = null;
  let awaitingNames = false; // after a git header or "---", before "+++"
  let srcLeft = 0;
  let tgtLeft = 0;
  for (const line of patch.split("\n")) {
    if (srcLeft > 0 || tgtLeft > 0) {
      const kind = line[0] ?? " ";
      if (kind === " " || line === "" || line === "\r") {
        srcLeft--;
        tgtLeft--;
        continue;
      }
      if (kind === "-") {
        srcLeft--;
        continue;
      }
      if (kind === "+") {
        tgtLeft--;
        continue;
      }
      if (kind === "\\") continue;
      srcLeft = 0;
      tgtLeft = 0;
    }
    const git = GIT_HEADER.exec(line);
    if (git) {
      current = { source: git[1] as string, target: git[2] as string };
      files.push(current);
      awaitingNames = true;
      continue;
    }
    const src = SOURCE.exec(line);
    if (src) {
      if (!awaitingNames || current === null) {
        current = { source: "", target: "" };
        files.push(current);
      }
      current.source = src[1] as string;
      awaitingNames = true;
      continue;
    }
    const tgt = TARGET.exec(line);
    if (tgt && current !== null && awaitingNames) {
      current.target = tgt[1] as string;
      awaitingNames = false;
      continue;
    }
    const hunk = HUNK.exec(line);
    if (hunk && current !== null) {
      srcLeft = hunk[1] === undefined ? 1 : Number(hunk[1]);
      tgtLeft = hunk[2] === undefined ? 1 : Number(hunk[2]);
      awaitingNames = false;
    }
  }
  return files;
}

/** `get_modified_files`: sources that existed before the patch, without the `a/` prefix. */
export function modifiedFiles(patch: string): string[] {
  return patchedFiles(patch)
    .map((f) => f.source)
    .filter((s) => s !== "/dev/null" && s.startsWith("a/"))
    .map((s) => s.slice(2));
}

/** unidiff `PatchedFile.path`. */
export function patchedPath(f: PatchedFile): string {
  if (f.source.startsWith("a/") && f.target.startsWith("b/")) return f.source.slice(2);
  if (f.source.startsWith("a/") && f.target === "/dev/null") return f.source.slice(2);
  if (f.target.startsWith("b/") && f.source === "/dev/null") return f.target.slice(2);
  return f.source;
}

const DIRECTIVE = /diff --git a\/[^\n]* b\/([^\n]*)/g;

/** `get_test_directives`: test files named by the test patch; django wants dotted module labels. */
export function testDirectives(repo: string, testPatch: string): string[] {
  if (repo === "swe-bench/humaneval") return ["test.py"];
  const directives = [...testPatch.matchAll(DIRECTIVE)]
    .map((m) => m[1] as string)
    .filter((d) => !NON_TEST_EXTS.some((ext) => d.endsWith(ext)));
  if (repo !== "django/django") return directives;
  return directives.map((d) => {
    let x = d.endsWith(".py") ? d.slice(0, -3) : d;
    x = x.startsWith("tests/") ? x.slice("tests/".length) : x;
    return x.replaceAll("/", ".");
  });
}
