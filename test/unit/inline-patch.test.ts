import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  AttemptResultSchema,
  emptyUsage,
  INLINE_PATCH_MAX_BYTES,
  inlinePatchText,
} from "../../protocol/messages.js";

const enc = (s: string) => new TextEncoder().encode(s);

describe("which patches travel inline in the attempt result", () => {
  it("small UTF-8 text does, byte for byte (a BOM and multi-byte characters kept)", () => {
    const text = "\uFEFFdiff --git a/é.py b/é.py\n+naïve → fixed ✓\n";
    assert.equal(inlinePatchText(enc(text)), text);
  });

  it("an empty patch, one past the limit, invalid UTF-8 or a NUL byte does not", () => {
    assert.equal(inlinePatchText(new Uint8Array()), null);
    assert.equal(inlinePatchText(enc("+".repeat(INLINE_PATCH_MAX_BYTES + 1))), null);
    assert.notEqual(
      inlinePatchText(enc("+".repeat(INLINE_PATCH_MAX_BYTES - 2))),
      null,
      "at the limit as JSON",
    );
    assert.equal(inlinePatchText(Uint8Array.from([0x2b, 0xff, 0xfe, 0x0a])), null);
    assert.equal(inlinePatchText(enc("+a\u0000b\n")), null);
  });

  it("the limit counts JSON escapes: control characters that grow sixfold in the message do not", () => {
    const text = "\u0001".repeat(Math.floor(INLINE_PATCH_MAX_BYTES / 2));
    assert.equal(inlinePatchText(enc(text)), null);
  });

  it("a result from before patches travelled inline still parses, with no inline patch", () => {
    const old = {
      type: "evalfleet.attempt.result.v1",
      run: "r",
      cellId: "c",
      attempt: 0,
      status: "PATCH_READY",
      exitCode: 0,
      usage: emptyUsage(),
      patchHash: "h",
      patchRef: "r/c/0/patch.diff",
      trajectoryRef: null,
      stdout: "",
      stderr: "",
      errorMessage: null,
      startedAt: "2026-12-01T00:00:00.000Z",
      finishedAt: "2026-12-01T00:00:01.000Z",
      latencyMs: 1000,
    };
    assert.equal(AttemptResultSchema.parse(old).patch, null);
  });
});
