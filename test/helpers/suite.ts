import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before } from "node:test";

/**
 * A resource for the enclosing suite (or file): started in its `before` hook, released in its `after` hook. The
 * returned getter reads it from inside the suite's tests.
 */
export function forSuite<T>(start: () => Promise<T>, release: (resource: T) => Promise<void>): () => T {
  let resource: T | undefined;
  before(async () => {
    resource = await start();
  });
  after(async () => {
    if (resource !== undefined) await release(resource);
  });
  return () => {
    if (resource === undefined)
      throw new Error("forSuite: read outside the suite's tests (its `before` has not run)");
    return resource;
  };
}

/** A temporary folder for the enclosing suite, removed after it. */
export function tempDirForSuite(prefix: string): () => string {
  return forSuite(
    () => mkdtemp(join(tmpdir(), prefix)),
    (dir) => rm(dir, { recursive: true, force: true }),
  );
}
