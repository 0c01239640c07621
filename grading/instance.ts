/** The slice of a SWE-bench dataset record that grading needs, validated with actionable issues. */
import { ErrorCode, type Issue, ValidationError } from "../protocol/errors.js";

export interface GradingInstance {
  instance_id: string;
  repo: string;
  /** Absent or null is fine for grading a log; eval-script generation needs it. */
  version: string | null;
  FAIL_TO_PASS: string[];
  PASS_TO_PASS: string[];
  base_commit?: string;
  test_patch?: string;
  /** Multimodal records: images the test patch references, downloaded by the eval script. */
  image_assets?: unknown;
}

function testList(record: Record<string, unknown>, key: string, issues: Issue[]): string[] {
  let value = record[key];
  if (value === undefined) {
    issues.push({ path: key, reason: "missing; give a list of test ids (may be empty: [])" });
    return [];
  }
  // The published dataset stores these as JSON-encoded strings, exactly as the harness json.loads them.
  if (typeof value === "string") {
    try {
      value = JSON.parse(value);
    } catch {
      issues.push({
        path: key,
        reason: "is a string but not valid JSON; expected a JSON list like '[\"test_a\"]'",
      });
      return [];
    }
  }
  if (!Array.isArray(value) || value.some((t) => typeof t !== "string")) {
    issues.push({ path: key, reason: "must be a list of strings (or a JSON-encoded list of strings)" });
    return [];
  }
  return value as string[];
}

function optionalString(record: Record<string, unknown>, key: string, issues: Issue[]): string | undefined {
  const v = record[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") {
    issues.push({ path: key, reason: "must be a string when present" });
    return undefined;
  }
  return v;
}

/** Validate an instance record; throws ValidationError listing every problem at once. */
export function parseGradingInstance(input: unknown, where = "instance"): GradingInstance {
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    throw new ValidationError(
      ErrorCode.InvalidMessage,
      `${where} must be a JSON object (one dataset record)`,
      [{ path: "", reason: `got ${Array.isArray(input) ? "an array" : typeof input}` }],
    );
  }
  const record = input as Record<string, unknown>;
  const issues: Issue[] = [];
  for (const key of ["instance_id", "repo"]) {
    const v = record[key];
    if (typeof v !== "string" || v.length === 0) {
      issues.push({
        path: key,
        reason: v === undefined ? "missing; required" : "must be a non-empty string",
      });
    }
  }
  const f2p = testList(record, "FAIL_TO_PASS", issues);
  const p2p = testList(record, "PASS_TO_PASS", issues);
  let version: string | null = null;
  const rawVersion = record.version;
  if (typeof rawVersion === "string") version = rawVersion;
  else if (typeof rawVersion === "number") version = String(rawVersion);
  else if (rawVersion !== undefined && rawVersion !== null) {
    issues.push({ path: "version", reason: 'must be a string like "3.0", null, or absent' });
  }
  const base_commit = optionalString(record, "base_commit", issues);
  const test_patch = optionalString(record, "test_patch", issues);
  if (issues.length > 0) {
    throw new ValidationError(
      ErrorCode.InvalidMessage,
      `${where} is not a usable SWE-bench instance record`,
      issues,
    );
  }
  const out: GradingInstance = {
    instance_id: record.instance_id as string,
    repo: record.repo as string,
    version,
    FAIL_TO_PASS: f2p,
    PASS_TO_PASS: p2p,
  };
  if (base_commit !== undefined) out.base_commit = base_commit;
  if (test_patch !== undefined) out.test_patch = test_patch;
  if (record.image_assets !== undefined) out.image_assets = record.image_assets;
  return out;
}
