/** Grading exactly as the official SWE-bench harness v4.x: the pure core the backends and the CLI share. */
export * from "./constants.js";
export { modifiedFiles, testDirectives } from "./diff.js";
export { makeEvalScript, makeEvalScriptList, makeLocalEvalScript } from "./eval-script.js";
export { type GradingInstance, parseGradingInstance } from "./instance.js";
export { evaluateLog, type LogEval, type LogGeneration, type LogRejection, logGeneration } from "./logs.js";
export { type LogParser, MAP_REPO_TO_PARSER, PARSERS_BY_FORMAT, type StatusMap } from "./parsers/index.js";
export { ParserCrash, pyJsonDumps } from "./pycompat.js";
export {
  type EvalReport,
  type GradeResult,
  getEvalTestsReport,
  getResolutionStatus,
  gradeLog,
  type InstanceReport,
  parserForRepo,
  type TestsStatus,
} from "./report.js";
export { specFor, specRepos, specVersions } from "./specs.js";
