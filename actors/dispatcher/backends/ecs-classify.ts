import type { StopClass } from "./types.js";

/**
 * How an ECS task ended, read from the fields DescribeTasks returns. Patterns are checked fatal-first because the
 * same wrapper (e.g. CannotPullContainerError, ResourceInitializationError) carries both kinds: a pull that timed
 * out is worth retrying, a manifest that does not exist never will be.
 */
const FATAL: Array<[RegExp, string]> = [
  [/manifest (?:for .* )?unknown|manifest unknown/i, "image manifest unknown"],
  [/CannotPullContainerError[\s\S]*(?:not found|does not exist)/i, "image not found"],
  [/repository .*(?:not found|does not exist)/i, "image repository not found"],
  [/AccessDenied|access denied|not authorized|UnauthorizedOperation|403 Forbidden/i, "access denied"],
  [/invalid reference format|exec format error|executable file not found/i, "invalid image or entrypoint"],
];

const RETRYABLE: Array<[RegExp, string]> = [
  [/RESOURCE:|Capacity is unavailable|insufficient (?:capacity|memory|cpu)|capacity/i, "capacity"],
  [/SpotInterruption|TerminationNotice|spot/i, "spot interruption"],
  [
    /ResourceInitializationError|timeout|timed out|i\/o timeout|network|connection (?:reset|refused)|ENI|no such host|TLS handshake/i,
    "network",
  ],
  [
    /CannotPullContainerError|CannotStartContainerError|AGENT|DockerTimeoutError|ThrottlingException|Rate exceeded/i,
    "transient",
  ],
];

function match(text: string): { kind: "fatal" | "retryable"; label: string } | undefined {
  for (const [re, label] of FATAL) if (re.test(text)) return { kind: "fatal", label };
  for (const [re, label] of RETRYABLE) if (re.test(text)) return { kind: "retryable", label };
  return undefined;
}

/** The subset of an ECS Task this module reads (keeps it testable without the SDK's types). */
export interface EcsTaskLike {
  lastStatus?: string | undefined;
  stopCode?: string | undefined;
  stoppedReason?: string | undefined;
  startedAt?: Date | undefined;
  containers?:
    | Array<{ name?: string | undefined; exitCode?: number | undefined; reason?: string | undefined }>
    | undefined;
}

/** Phase of a task from its lastStatus. Anything short of STOPPED is still in flight. */
export function phaseOf(lastStatus: string | undefined): "pending" | "running" | "stopped" {
  switch (lastStatus) {
    case "STOPPED":
      return "stopped";
    case "RUNNING":
    case "DEACTIVATING":
    case "STOPPING":
    case "DEPROVISIONING":
      return "running";
    default:
      return "pending";
  }
}

/** Classify a stopped task. `containerName` picks the harness container's exit code. */
export function classifyStoppedTask(task: EcsTaskLike, containerName: string): StopClass {
  const neverStarted = task.startedAt === undefined;
  const main = task.containers?.find((c) => c.name === containerName) ?? task.containers?.[0];
  const text = [task.stopCode, task.stoppedReason, ...(task.containers ?? []).map((c) => c.reason)]
    .filter((s): s is string => typeof s === "string" && s.length > 0)
    .join(" | ");

  switch (task.stopCode) {
    case "SpotInterruption":
    case "TerminationNotice":
      return {
        kind: "retryable",
        reason: `${task.stopCode}: ${task.stoppedReason ?? ""}`.trim(),
        neverStarted,
      };
    case "EssentialContainerExited":
      if (typeof main?.exitCode === "number" && !neverStarted)
        return { kind: "exited", exitCode: main.exitCode };
      break;
    case "UserInitiated":
    case "ServiceSchedulerInitiated":
      // We (or an operator) stopped it: final, unless the task had exited on its own first.
      if (typeof main?.exitCode === "number" && !neverStarted)
        return { kind: "exited", exitCode: main.exitCode };
      return { kind: "fatal", reason: `stopped: ${task.stoppedReason ?? task.stopCode}`, neverStarted };
  }
  const m = match(text);
  if (m) return { kind: m.kind, reason: `${m.label}: ${text}`, neverStarted };
  if (typeof main?.exitCode === "number" && !neverStarted) return { kind: "exited", exitCode: main.exitCode };
  // Unknown reason: not retried blindly (it could loop forever), but never charged to the model if it never ran.
  return { kind: "fatal", reason: text || "stopped without a reason", neverStarted };
}

/** Classify one entry of RunTask's `failures[]` (the task was never created). */
export function classifyRunFailure(f: {
  reason?: string | undefined;
  detail?: string | undefined;
}): StopClass {
  const text = [f.reason, f.detail].filter(Boolean).join(": ") || "unknown RunTask failure";
  const m = match(text);
  if (m?.kind === "fatal") return { kind: "fatal", reason: text, neverStarted: true };
  // MISSING / ATTRIBUTE mean the cluster or task definition is wrong: retrying cannot help.
  if (!m && /^(MISSING|ATTRIBUTE)/.test(f.reason ?? ""))
    return { kind: "fatal", reason: text, neverStarted: true };
  return { kind: "retryable", reason: text, neverStarted: true };
}

/** Exceptions RunTask/StopTask can throw that are worth another try (after waiting). */
const RETRYABLE_ERRORS = new Set([
  "ThrottlingException",
  "ServerException",
  "ServiceUnavailableException",
  "TimeoutError",
]);

export function isRetryableApiError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const e = err as Error & { $retryable?: unknown; $metadata?: { httpStatusCode?: number } };
  if (RETRYABLE_ERRORS.has(e.name) || e.$retryable) return true;
  const status = e.$metadata?.httpStatusCode;
  return typeof status === "number" && (status === 429 || status >= 500);
}

/** A thrown RunTask error as a StopClass for the one ref it concerned. */
export function classifyRunError(err: unknown): StopClass {
  const name = err instanceof Error ? err.name : "Error";
  const message = err instanceof Error ? err.message : String(err);
  const text = `${name}: ${message}`;
  if (isRetryableApiError(err)) return { kind: "retryable", reason: text, neverStarted: true };
  const m = match(text);
  if (m?.kind === "retryable") return { kind: "retryable", reason: text, neverStarted: true };
  // ClientException, InvalidParameterException, ClusterNotFound, PlatformUnknown, Blocked, Conflict, AccessDenied…
  return { kind: "fatal", reason: text, neverStarted: true };
}
