/**
 * `npm test`'s pretest: the images every container test needs, built once before the test files start, so no test
 * spends its own time budget on a build (the harness layer takes ≈ 90 s on 2 cores, longer beside running tests).
 *
 * Where a Docker API answers — DOCKER_HOST, the default sockets, or the private daemon the container tests start as
 * root (test/helpers/docker.ts) — it makes the base image from the test rootfs, the harness image over it (the
 * image every attempt of a shipped task runs in when the local backend puts harnesses in containers), and the
 * sample tasks' instance images, built offline and pushed to the test registry (what the grading, validation and
 * main-job tests grade in by digest). Where none can be had it says so and leaves the container tests to report it
 * themselves.
 */
import { loadTaskLibrary } from "../../actors/planner/library.js";
import { ensureHarnessImage } from "../../images/harness.js";
import { buildLibraryImages } from "../../images/library.js";
import { createLogger } from "../../lib/log.js";
import { SAMPLE_LIBRARY } from "../../local/providers.js";
import { testBaseImage, testRegistry, testRootfs, testRuntime } from "./docker.js";

const log = createLogger({ name: "pretest", level: "info" });
const t0 = Date.now();
try {
  const { runtime, dockerHost } = await testRuntime();
  const rootfs = await testRootfs();
  const base = await testBaseImage();
  const harness = await ensureHarnessImage(runtime, base.ref, { logger: log });
  const registry = await testRegistry();
  const library = await loadTaskLibrary(SAMPLE_LIBRARY);
  const samples = await buildLibraryImages(runtime, [...library.tasks.values()], {
    libraryDir: library.dir,
    base: base.ref,
    registry,
    logger: log,
  });
  process.stdout.write(
    `pretest: container images ready in ${((Date.now() - t0) / 1000).toFixed(1)} s ` +
      `(docker ${dockerHost}; rootfs ${rootfs}; base ${base.ref}; harness ${harness.ref}${harness.built ? ", built now" : ""}; ` +
      `sample tasks ${samples.map((s) => s.ref).join(", ")} in ${registry})\n`,
  );
} catch (err) {
  process.stdout.write(
    `pretest: no container images prepared (${(err as Error).message}); the container tests will say what they need\n`,
  );
}
