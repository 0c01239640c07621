/**
 * Reading what a harness wrote. Everything under the harness's folders is the harness's: a trajectory file may be
 * a symlink to a file of the host's, a FIFO that never ends, a folder on the way may have become a link, a file may
 * be larger than memory. The task reads through none of them.
 */
import { constants } from "node:fs";
import { lstat, open } from "node:fs/promises";
import path from "node:path";

/** More than any real trajectory file; a harness that writes more has the rest ignored. */
export const MAX_HARNESS_FILE_BYTES = 64 * 1024 * 1024;

/** True when every folder from `root` (exclusive) down to `file`'s parent is a real folder, not a link. */
async function realFoldersBelow(root: string, file: string): Promise<boolean> {
  const rel = path.relative(root, path.dirname(file));
  if (rel.startsWith("..") || path.isAbsolute(rel)) return false;
  let at = root;
  for (const part of rel === "" ? [] : rel.split(path.sep)) {
    at = path.join(at, part);
    const st = await lstat(at).catch(() => null);
    if (!st?.isDirectory()) return false;
  }
  return true;
}

/**
 * The text of a regular file inside one of `roots` (first `maxBytes`), or null when it is missing, outside the
 * roots, reached through a symlink (of the file or of a folder below its root), or not a regular file.
 */
export async function readHarnessFile(
  file: string,
  roots: readonly string[],
  maxBytes = MAX_HARNESS_FILE_BYTES,
): Promise<string | null> {
  const root = roots.find((r) => file.startsWith(r + path.sep));
  if (!root || !(await realFoldersBelow(root, file))) return null;
  let fh: Awaited<ReturnType<typeof open>>;
  try {
    // O_NOFOLLOW: a symlink fails to open; O_NONBLOCK: a FIFO does not hang the open.
    fh = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    const st = await fh.stat();
    if (!st.isFile()) return null;
    const buf = Buffer.alloc(Math.min(st.size, maxBytes));
    const { bytesRead } = await fh.read(buf, 0, buf.length, 0);
    return buf.subarray(0, bytesRead).toString("utf8");
  } finally {
    await fh.close();
  }
}
