/** The shapes of MAP_REPO_VERSION_TO_SPECS as specs.data.ts holds it and specs.ts looks it up. */

/** Language family, as MAP_REPO_TO_EXT; selects the eval-script flavour. */
export type RepoExt = "py" | "js" | "c" | "go" | "java" | "php" | "rb" | "rs";

export interface VersionSpec {
  /** A single command (python) or a list run one after another (others). Absent only for dbt-core. */
  testCmd?: string | string[];
  /** Python: run in the eval script before the tests (re-installs the package after the patch). */
  install?: string;
  /** Extra environment setup at the top of the eval script. */
  evalCommands?: string[];
  /** Non-python: build steps run after applying the test patch. */
  build?: string[];
}

export interface SpecGroup extends VersionSpec {
  versions: string[];
}

export type SpecTable = Record<string, { ext: RepoExt; groups: SpecGroup[] }>;
