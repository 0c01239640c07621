/**
 * The two byte formats the Engine API speaks besides JSON: a plain ustar archive (what PUT /archive takes, for
 * files copied into a container) and the multiplexed stdout/stderr stream of a container without a TTY.
 */
import { ContainerError } from "./errors.js";

export interface TarFile {
  /** Relative path inside the archive (no leading `/`, no `..`), at most 100 bytes. */
  name: string;
  content: string | Uint8Array;
  /** Octal permission bits; default 0o644. */
  mode?: number;
  uid?: number;
  gid?: number;
}

function octal(n: number, width: number): string {
  // width-1 digits then NUL, as ustar wants.
  return `${n.toString(8).padStart(width - 1, "0")}\0`;
}

function header(name: string, size: number, mode: number, uid: number, gid: number): Buffer {
  const h = Buffer.alloc(512, 0);
  h.write(name, 0, 100, "utf8");
  h.write(octal(mode, 8), 100, 8, "ascii");
  h.write(octal(uid, 8), 108, 8, "ascii");
  h.write(octal(gid, 8), 116, 8, "ascii");
  h.write(octal(size, 12), 124, 12, "ascii");
  h.write(octal(0, 12), 136, 12, "ascii");
  h.write("        ", 148, 8, "ascii"); // checksum counted as spaces
  h.write("0", 156, 1, "ascii");
  h.write("ustar\0", 257, 6, "ascii");
  h.write("00", 263, 2, "ascii");
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, 8, "ascii");
  return h;
}

/** An archive of regular files; refuses names that could land outside the target folder. */
export function tarFiles(files: readonly TarFile[]): Buffer {
  const parts: Buffer[] = [];
  for (const f of files) {
    const bytes = Buffer.from(f.name, "utf8");
    if (
      bytes.length === 0 ||
      bytes.length > 100 ||
      f.name.startsWith("/") ||
      f.name.split("/").some((s) => s === ".." || s === "") ||
      f.name.includes("\0")
    ) {
      throw new ContainerError(
        "invalid",
        `cannot copy ${JSON.stringify(f.name)} into a container: use a relative name of at most 100 bytes without '..'`,
      );
    }
    const body = typeof f.content === "string" ? Buffer.from(f.content, "utf8") : Buffer.from(f.content);
    parts.push(header(f.name, body.length, f.mode ?? 0o644, f.uid ?? 0, f.gid ?? 0), body);
    const pad = (512 - (body.length % 512)) % 512;
    if (pad) parts.push(Buffer.alloc(pad, 0));
  }
  parts.push(Buffer.alloc(1024, 0));
  return Buffer.concat(parts);
}

export interface Demuxed {
  stdout: string;
  stderr: string;
  /** Both, in the order the frames arrived. */
  combined: string;
}

/**
 * Split a multiplexed stream (8-byte frame headers: stream id, 3 zero bytes, big-endian length). Frames split
 * across chunks are handled by the caller feeding one concatenated buffer; a truncated last frame is kept.
 */
export function demux(buf: Buffer): Demuxed {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  const all: Buffer[] = [];
  let i = 0;
  while (i + 8 <= buf.length) {
    const stream = buf[i];
    const len = buf.readUInt32BE(i + 4);
    const frame = buf.subarray(i + 8, Math.min(buf.length, i + 8 + len));
    (stream === 2 ? err : out).push(frame);
    all.push(frame);
    i += 8 + len;
  }
  return {
    stdout: Buffer.concat(out).toString("utf8"),
    stderr: Buffer.concat(err).toString("utf8"),
    combined: Buffer.concat(all).toString("utf8"),
  };
}
