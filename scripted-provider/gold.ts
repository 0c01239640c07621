import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { TaskSpec } from "../protocol/config.js";
import { git, gitText } from "../task/git.js";
import { localMirror } from "../task/workdir.js";
import type { FixFile, TaskFix } from "./fixes.js";

/**
 * A shipped task's gold patch as whole files (what a scripted agent writes): applied to a scratch checkout of the
 * task's base, every changed or added file read back. Tasks without a local repository or a gold patch give none.
 */
export async function goldFixFiles(
  task: TaskSpec,
  libraryDir: string,
  /** where the task's git mirror is made (the tasks' mirror cache) */
  mirrorRoot: string,
): Promise<FixFile[]> {
  if (task.repo_path === undefined || task.patch.trim() === "") return [];
  const mirror = await localMirror(path.resolve(libraryDir, task.repo_path), mirrorRoot);
  const scratch = await mkdtemp(path.join(tmpdir(), "evalfleet-gold-"));
  try {
    const repo = path.join(scratch, "repo");
    await git(scratch, ["clone", "-q", "--shared", mirror, repo]);
    await writeFile(
      path.join(scratch, "gold.diff"),
      task.patch.endsWith("\n") ? task.patch : `${task.patch}\n`,
    );
    await git(repo, ["apply", "--whitespace=nowarn", path.join(scratch, "gold.diff")]);
    await git(repo, ["add", "-A"]);
    const changed = (await gitText(repo, ["diff", "--cached", "--name-only", "--no-renames", "HEAD"]))
      .split("\n")
      .filter((f) => f !== "");
    const files: FixFile[] = [];
    for (const f of changed)
      if (existsSync(path.join(repo, f)))
        files.push({ path: f, content: await readFile(path.join(repo, f), "utf8") });
    return files;
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

/** Every task's gold fix, keyed by problem statement, for libraryFixScenario. */
export async function libraryFixes(
  tasks: readonly TaskSpec[],
  libraryDir: string,
  mirrorRoot: string,
): Promise<TaskFix[]> {
  const out: TaskFix[] = [];
  for (const t of tasks)
    out.push({ problemStatement: t.problem_statement, files: await goldFixFiles(t, libraryDir, mirrorRoot) });
  return out;
}
