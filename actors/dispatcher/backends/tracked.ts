import type { TaskState } from "./types.js";

/**
 * observe() for a backend that tracks its tasks in memory: the state of each of `handles` it knows, by handle.
 * With `forgetStopped`, a stopped task is dropped once its stop has been reported.
 */
export function observeTracked<T extends Pick<TaskState, "ref" | "phase" | "stop">>(
  tasks: Map<string, T>,
  handles: readonly string[],
  forgetStopped = false,
): TaskState[] {
  const out: TaskState[] = [];
  for (const h of handles) {
    const t = tasks.get(h);
    if (!t) continue;
    out.push({ ref: t.ref, handle: h, phase: t.phase, ...(t.stop ? { stop: t.stop } : {}) });
    if (forgetStopped && t.phase === "stopped") tasks.delete(h);
  }
  return out;
}
