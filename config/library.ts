import { resolve } from "node:path";
import { defineGroup, listText, setting } from "./setting.js";

/** The task library folders shipped with evalfleet (the sample's `tasks`). */
export const SHIPPED_LIBRARY_ROOT = resolve(import.meta.dirname, "../examples");

/** The state folder's own library root: `<state-dir>/libraries`. */
export function stateLibraries(stateDir: string | undefined): string {
  return resolve(stateDir ?? ".evalfleet", "libraries");
}

/** Where the planner may read task libraries from. */
export interface LibrarySettings {
  /** absolute folders; a run's `task_library_path` must resolve inside one of them */
  roots: string[];
}

export const libraryGroup = defineGroup({
  name: "library",
  doc: "Task libraries the planner may read (a run's task_library_path must resolve inside one of these roots).",
  settings: {
    roots: setting({
      env: "EVALFLEET_TASK_LIBRARY_ROOTS",
      doc: "folders the planner reads task libraries from, comma-separated; a relative task_library_path is looked up under each in order, an absolute one must lie inside one",
      schema: listText,
      defaultDoc:
        "`<state-dir>/libraries` (EVALFLEET_STATE_DIR, default .evalfleet: where `tasks import` output belongs), then the shipped examples/ folder",
      hint: "e.g. /srv/evalfleet/libraries,/home/me/tasks",
    }),
  },
  compile(v, ctx): LibrarySettings {
    if (v.roots.length > 0) return { roots: v.roots.map((r) => resolve(r)) };
    // Not the working directory: a planner started in a home folder would read any library a submitter names
    // under it. A folder of evalfleet's own, and the shipped samples, are what a planner may read unless told.
    return { roots: [stateLibraries(ctx.value<string>("EVALFLEET_STATE_DIR")), SHIPPED_LIBRARY_ROOT] };
  },
});
