/** Reading a judge's answer whatever shape the model wrapped it in. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { normaliseScore, parseVerdict } from "../../actors/judge/prompt.js";

describe("parseVerdict", () => {
  it("reads a bare JSON object", () => {
    assert.deepEqual(parseVerdict('{"score": 0.25, "rationale": "partial"}'), {
      score: 0.25,
      rationale: "partial",
    });
  });

  it("reads a fenced object and one inside prose, braces in strings included", () => {
    assert.deepEqual(parseVerdict('```json\n{"score": 1, "rationale": "all {good}"}\n```'), {
      score: 1,
      rationale: "all {good}",
    });
    assert.deepEqual(parseVerdict('Sure. {"note": {"x": 1}} then {"score": 0.4, "reason": "meh"} done'), {
      score: 0.4,
      rationale: "meh",
    });
  });

  it("falls back to a written-out score", () => {
    assert.deepEqual(parseVerdict("score: 0.8\nrationale: solid work"), {
      score: 0.8,
      rationale: "solid work",
    });
  });

  it("returns null when there is no score", () => {
    assert.equal(parseVerdict("I think it is decent."), null);
    assert.equal(parseVerdict('{"score": "great"}'), null);
    assert.equal(parseVerdict('{"score": -1}'), null);
  });
});

describe("normaliseScore", () => {
  it("maps percentages and 10/100-point scales to 0..1", () => {
    assert.equal(normaliseScore(0.7), 0.7);
    assert.equal(normaliseScore("0.7"), 0.7);
    assert.equal(normaliseScore("70%"), 0.7);
    assert.equal(normaliseScore("7/10"), 0.7);
    assert.equal(normaliseScore(7), 0.7);
    assert.equal(normaliseScore(70), 0.7);
    assert.equal(normaliseScore(700), null);
    assert.equal(normaliseScore(Number.NaN), null);
  });
});
