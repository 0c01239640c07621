/** MAP_REPO_VERSION_TO_SPECS lookups: the per-repository, per-version test command and eval setup. */
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import type { RepoExt, SpecTable, VersionSpec } from "./spec-types.js";
import { SPEC_TABLE } from "./specs.data.js";

/** The table's entry for a repository; own keys only, so `constructor` is no repository. */
function entryOf(repo: string): SpecTable[string] | undefined {
  return Object.hasOwn(SPEC_TABLE, repo) ? SPEC_TABLE[repo] : undefined;
}

/** Every repository the official harness has specs for. */
export function specRepos(): string[] {
  return Object.keys(SPEC_TABLE);
}

/** The versions a repository has specs for. */
export function specVersions(repo: string): string[] {
  return entryOf(repo)?.groups.flatMap((g) => g.versions) ?? [];
}

export function repoExt(repo: string): RepoExt | undefined {
  return entryOf(repo)?.ext;
}

/** The spec for repo+version; throws UnknownTask naming the versions that exist. */
export function specFor(repo: string, version: string | null): VersionSpec {
  const entry = entryOf(repo);
  if (!entry) {
    throw new EvalfleetError(ErrorCode.UnknownTask, `no SWE-bench specs for repository "${repo}"`);
  }
  const group = version === null ? undefined : entry.groups.find((g) => g.versions.includes(version));
  if (!group) {
    const known = entry.groups.flatMap((g) => g.versions).join(", ");
    throw new EvalfleetError(
      ErrorCode.UnknownTask,
      `no SWE-bench specs for ${repo} version ${JSON.stringify(version)}; the instance record needs one of: ${known}`,
    );
  }
  const { versions: _versions, ...spec } = group;
  return spec;
}
