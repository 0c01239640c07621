/** The JSON-lines progress streams of pull, push, build and import: read to the end, errors surfaced. */
import type { Readable } from "node:stream";
import { ContainerError, type ContainerFailure, mentionsOutOfDisk } from "./errors.js";

export interface ProgressLine {
  status?: string;
  stream?: string;
  error?: string;
  errorDetail?: { message?: string };
  aux?: { ID?: string; Digest?: string; Tag?: string; Size?: number };
}

export interface ProgressResult {
  lines: ProgressLine[];
  /** Build output (`stream` members) joined, for error messages and logs. */
  text: string;
  /** The last `aux` member: the built image id, or the pushed digest. */
  aux: ProgressLine["aux"] | undefined;
}

/**
 * Consume a progress stream. An `error` line (the daemon reports a failed pull / push / build step this way, with
 * HTTP 200) becomes a ContainerError of kind `failure`; so does the stream breaking, or the signal aborting.
 */
export function followProgress(
  stream: Readable,
  failure: ContainerFailure,
  what: string,
  signal?: AbortSignal,
): Promise<ProgressResult> {
  return new Promise((resolve, reject) => {
    const lines: ProgressLine[] = [];
    const text: string[] = [];
    let aux: ProgressLine["aux"] | undefined;
    let buf = "";
    let done = false;
    const finish = (err?: Error): void => {
      if (done) return;
      done = true;
      signal?.removeEventListener("abort", onAbort);
      if (err) reject(err);
      else resolve({ lines, text: text.join(""), aux });
    };
    const onAbort = (): void => {
      stream.destroy();
      finish(new ContainerError("timeout", `${what}: aborted`));
    };
    if (signal?.aborted) return onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    const take = (raw: string): void => {
      const line = raw.trim();
      if (line === "") return;
      let obj: ProgressLine;
      try {
        obj = JSON.parse(line) as ProgressLine;
      } catch {
        text.push(`${line}\n`);
        return;
      }
      lines.push(obj);
      if (obj.stream) text.push(obj.stream);
      if (obj.aux) aux = obj.aux;
      const error = obj.errorDetail?.message ?? obj.error;
      if (error) {
        stream.destroy();
        const kind = mentionsOutOfDisk(error) ? "out_of_disk" : failure;
        const tail = text.join("").slice(-2000).trim();
        finish(new ContainerError(kind, `${what}: ${error}${tail ? `\n${tail}` : ""}`));
      }
    };
    stream.on("data", (chunk: Buffer | string) => {
      buf += chunk.toString();
      for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
        take(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
      }
    });
    stream.on("error", (err) =>
      finish(new ContainerError(failure, `${what}: ${err.message}`, { cause: err })),
    );
    stream.on("end", () => {
      take(buf);
      finish();
    });
    stream.on("close", () => {
      take(buf);
      finish();
    });
  });
}
