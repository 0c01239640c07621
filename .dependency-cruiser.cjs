/**
 * Imports run one way: `npm run lint:deps` (in .ci/run) fails on any import from a folder to one listed after it
 * in LAYERS, on an actor folder importing another actor folder (actors/runtime is shared), on product code
 * importing test/ or bench/, and on any cycle, inside a folder too. Type-only imports count: a type is a dependency
 * on the folder that defines it. The order is the one docs/architecture.md draws.
 */

/** Lowest layer first: a folder may import only from itself and the folders before it. */
const LAYERS = [
  "protocol", // the wire contract: subjects, schemas, ids, money, errors; imports nothing in the repo
  "lib", // logger, retry, close: shared non-wire helpers
  "config", // one typed settings schema per role; the only reader of process.env
  "plane", // opening NATS, typed KV, compare-and-set
  "containers", // the container runtime client
  "images", // building and mirroring images
  "store", // every SQL statement
  "providers", // provider wire formats, usage, pricing
  "pacer", // paced admission
  "shim", // the per-attempt proxy
  "harnesses", // harness adapters
  "task", // the harness task entrypoint
  "gateway", // the gateway replicas
  "grading", // SWE-bench grading semantics
  "scripted-provider", // the fake provider and fix scenarios
  "actors", // runtime, planner, dispatcher, results-writer, grader-supervisor, judge
  "local", // the local launcher
  "report",
  "dashboard",
  "cli", // the evalfleet command line
  "deploy", // AWS CDK
  "bin",
];

const quote = (s) => s.replace(/[.*+?^${}()|[\]\\-]/g, "\\$&");

const upward = LAYERS.slice(0, -1).map((layer, i) => ({
  name: `layer-${layer}`,
  comment: `${layer}/ may import only from ${LAYERS.slice(0, i).join(", ") || "nothing else in the repo"}: ${LAYERS.slice(i + 1).join(", ")} are above it`,
  severity: "error",
  from: { path: `^${quote(layer)}/` },
  to: {
    path: `^(${LAYERS.slice(i + 1)
      .map(quote)
      .join("|")})/`,
  },
}));

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    ...upward,
    {
      name: "actor-to-actor",
      comment:
        "an actor folder imports no other actor folder: what two actors share lives in actors/runtime or a lower layer",
      severity: "error",
      from: { path: "^actors/([^/]+)/" },
      to: { path: "^actors/[^/]+/", pathNot: ["^actors/$1/", "^actors/runtime/"] },
    },
    {
      name: "product-to-tests",
      comment: "product code never imports test/ or bench/ (those may import anything)",
      severity: "error",
      from: { pathNot: "^(test|bench)/" },
      to: { path: "^(test|bench)/" },
    },
    {
      name: "no-circular",
      comment: "no import cycles anywhere, inside a folder too",
      severity: "error",
      from: {},
      to: { circular: true },
    },
    {
      name: "not-to-unresolvable",
      comment: "an import that does not resolve to a file or an installed package",
      severity: "error",
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: ["^node_modules", "^deploy/cdk\\.out", "^test/fixtures/"] },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: {
      exportsFields: ["exports"],
      conditionNames: ["import", "require", "node", "default", "types"],
      extensions: [".ts", ".js", ".mjs", ".cjs", ".json", ".d.ts"],
    },
  },
};
