import { StringDecoder } from "node:string_decoder";

/** One server-sent event: the `event:` name (empty when absent), the joined `data:` lines, and its exact text. */
export interface SseEvent {
  event: string;
  data: string;
  /** the event's text as received, including its terminating blank line */
  raw: string;
}

/**
 * An incremental SSE parser. It only observes: the caller forwards the original bytes unchanged (or `raw` per event
 * when it must hide one). Chunks may split events, lines and UTF-8 characters anywhere.
 */
export class SseParser {
  private buf = "";
  private readonly decoder = new StringDecoder("utf8");

  constructor(private readonly onEvent: (ev: SseEvent) => void) {}

  push(chunk: Uint8Array): void {
    this.buf += this.decoder.write(chunk as Buffer);
    this.drain();
  }

  /** Text held back because its event has not ended yet (a cut stream leaves this). */
  get pending(): string {
    return this.buf;
  }

  private drain(): void {
    for (;;) {
      const end = boundary(this.buf);
      if (end < 0) return;
      const raw = this.buf.slice(0, end);
      this.buf = this.buf.slice(end);
      const ev = parseEvent(raw);
      if (ev) this.onEvent(ev);
    }
  }
}

/** Index just past the first blank line (\n\n, \r\n\r\n or \r\r), or -1. */
function boundary(s: string): number {
  const lf = s.indexOf("\n\n");
  const crlf = s.indexOf("\r\n\r\n");
  if (lf < 0 && crlf < 0) {
    const cr = s.indexOf("\r\r");
    return cr < 0 ? -1 : cr + 2;
  }
  if (crlf >= 0 && (lf < 0 || crlf < lf)) return crlf + 4;
  return lf + 2;
}

function parseEvent(raw: string): SseEvent | undefined {
  let event = "";
  let data: string | undefined;
  for (const line of raw.split(/\r\n|\r|\n/)) {
    if (line.length === 0 || line.charCodeAt(0) === 58 /* ':' comment */) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data = data === undefined ? value : `${data}\n${value}`;
  }
  if (data === undefined && event === "") return undefined;
  return { event, data: data ?? "", raw };
}
