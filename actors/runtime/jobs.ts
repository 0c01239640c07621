import type { z } from "zod";
import type { Plane } from "../../plane/connect.js";
import { decodeJson } from "../../protocol/decode.js";

/** A value the planner put in the jobs bucket, validated; null when absent. */
export async function readJob<S extends z.ZodType>(
  plane: Plane,
  key: string,
  schema: S,
  what: string,
): Promise<z.output<S> | null> {
  const entry = await plane.kv.jobs.get(key);
  if (entry?.operation !== "PUT" || entry.value.length === 0) return null;
  return decodeJson(schema, entry.value, what);
}
