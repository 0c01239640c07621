import { createReadStream } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import type { Command } from "commander";
import { stringify } from "yaml";
import { TaskSpecSchema } from "../../protocol/config.js";
import { documentIssues, zodIssues } from "../../protocol/decode.js";
import { ErrorCode, type Issue, ValidationError } from "../../protocol/errors.js";
import { safeSlug } from "../../protocol/names.js";

/** instance_id → image pinned by digest, from a manifest `evalfleet images mirror --manifest` (or list) wrote. */
export async function readImageManifest(file: string): Promise<Map<string, string>> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readFile(file, "utf8"));
  } catch (err) {
    throw new ValidationError(ErrorCode.InvalidConfig, `cannot read the image manifest ${file}`, [
      {
        path: "--images",
        reason: `${(err as NodeJS.ErrnoException).code ?? (err as Error).message}: pass the JSON \`evalfleet images mirror --manifest FILE\` wrote`,
      },
    ]);
  }
  const images = (parsed as { images?: unknown }).images;
  const out = new Map<string, string>();
  const issues: Issue[] = [];
  if (!Array.isArray(images))
    issues.push({
      path: `${file}:images`,
      reason: 'expected {"images": [{"instance_id": …, "image": "name@sha256:…"}]}',
    });
  else
    images.forEach((e, i) => {
      const { instance_id, image } = (e ?? {}) as { instance_id?: unknown; image?: unknown };
      if (
        typeof instance_id !== "string" ||
        typeof image !== "string" ||
        !/@sha256:[0-9a-f]{64}$/.test(image)
      )
        issues.push({
          path: `${file}:images[${i}]`,
          reason: "needs instance_id and an image pinned by digest (name@sha256:…)",
        });
      else out.set(instance_id, image);
    });
  if (issues.length > 0)
    throw new ValidationError(ErrorCode.InvalidConfig, `the image manifest ${file} is not usable`, issues);
  return out;
}

/**
 * Turn SWE-bench dataset records (JSONL) into a task library: one YAML per instance, the dataset's own field names
 * kept, `id` = instance_id, track swe. With `images` (instance_id → name@digest, from a mirror manifest) each task
 * names its image pinned by digest; a task without one is given its mirror's digest by `validate-env`. Every bad
 * line is reported with its line number; nothing is written unless every line is good.
 */
export async function importSwebench(
  jsonl: string,
  dir: string,
  images: ReadonlyMap<string, string> = new Map(),
): Promise<{ written: number; dir: string; pinned: number }> {
  const tasks: Array<{ id: string; record: Record<string, unknown> }> = [];
  const issues: Issue[] = [];
  const seen = new Map<string, number>();
  const lines = createInterface({ input: createReadStream(jsonl), crlfDelay: Number.POSITIVE_INFINITY });
  let n = 0;
  try {
    for await (const line of lines) {
      n++;
      if (line.trim() === "") continue;
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch (err) {
        issues.push({
          path: `line ${n}`,
          reason: `not JSON: ${err instanceof Error ? err.message : String(err)}`,
        });
        continue;
      }
      if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
        issues.push({
          path: `line ${n}`,
          reason: `expected one dataset record (a JSON object with instance_id, repo, base_commit…), got ${Array.isArray(parsed) ? "a list" : parsed === null ? "null" : typeof parsed}`,
        });
        continue;
      }
      const rec = parsed as Record<string, unknown>;
      const id = rec.instance_id ?? rec.id;
      const image = typeof id === "string" ? images.get(id) : undefined;
      const candidate = { ...rec, id, track: rec.track ?? "swe", ...(image ? { image } : {}) };
      const shape = documentIssues(candidate);
      const r = TaskSpecSchema.safeParse(candidate);
      if (!r.success || shape.length > 0) {
        for (const i of [...shape, ...(r.success ? [] : zodIssues(r.error))])
          issues.push({ path: `line ${n}:${i.path}`, reason: i.reason });
        continue;
      }
      const earlier = seen.get(r.data.id);
      if (earlier !== undefined) {
        issues.push({ path: `line ${n}:instance_id`, reason: `${r.data.id} is also on line ${earlier}` });
        continue;
      }
      seen.set(r.data.id, n);
      tasks.push({ id: r.data.id, record: candidate });
    }
  } catch (err) {
    throw new ValidationError(ErrorCode.InvalidConfig, `cannot read ${jsonl}`, [
      { path: jsonl, reason: `${(err as NodeJS.ErrnoException).code ?? String(err)} — check the path` },
    ]);
  }
  if (issues.length > 0)
    throw new ValidationError(
      ErrorCode.InvalidConfig,
      `${jsonl} has ${issues.length} problem(s); nothing was written`,
      issues,
    );
  await mkdir(dir, { recursive: true });
  for (const t of tasks)
    await writeFile(join(dir, `${safeSlug(t.id)}.yaml`), stringify(t.record, { lineWidth: 0 }));
  return {
    written: tasks.length,
    dir,
    pinned: tasks.filter((t) => typeof t.record.image === "string").length,
  };
}

export function register(program: Command): void {
  const tasks = program.command("tasks").description("Manage task libraries");
  tasks
    .command("import")
    .description("Write a task library from SWE-bench dataset records (JSONL, one instance per line)")
    .argument("<jsonl>", "dataset records, e.g. swebench.jsonl")
    .argument("<dir>", "task library folder to write")
    .option(
      "--images <manifest>",
      "pin each task's image by digest from this manifest (`evalfleet images mirror --manifest FILE`)",
    )
    .option("--json", "print the result as JSON")
    .action(async (jsonl: string, dir: string, opts: { json?: boolean; images?: string }) => {
      const images = opts.images ? await readImageManifest(opts.images) : new Map<string, string>();
      const r = await importSwebench(jsonl, dir, images);
      if (opts.json) process.stdout.write(`${JSON.stringify(r)}\n`);
      else {
        process.stdout.write(
          `wrote ${r.written} task(s) to ${r.dir}; ${r.pinned} with an image pinned by digest\n`,
        );
        if (r.pinned < r.written)
          process.stdout.write(
            `next: mirror their images (evalfleet images mirror --tasks ${r.dir} --from <registry>) and validate them (evalfleet validate-env --tasks ${r.dir}); runs refuse tasks not validated\n`,
          );
      }
    });
}
