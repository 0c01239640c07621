/** MAP_REPO_TO_PARSER of the official harness: every repository it can grade, by log format. */
import {
  JAVASCRIPT_PARSERS,
  parseCalypso,
  parseChartJs,
  parseJest,
  parseJestJson,
  parseKarma,
  parseMarked,
  parseP5js,
  parseReactPdf,
  parseTap,
  parseVitest,
} from "./javascript.js";
import {
  NATIVE_PARSERS,
  parseAnt,
  parseCargo,
  parseCucumber,
  parseDoctest,
  parseGoogletest,
  parseGoTest,
  parseGradleCustom,
  parseJq,
  parseMaven,
  parseMicropython,
  parseMinitest,
  parsePhpunit,
  parseRedis,
  parseRspecTransformedJson,
  parseRubyUnit,
} from "./native.js";
import {
  PYTHON_PARSERS,
  parseDjango,
  parseMatplotlib,
  parsePytest,
  parsePytestOptions,
  parsePytestV2,
  parseSeaborn,
  parseSympy,
} from "./python.js";
import type { LogParser } from "./types.js";

export type { LogParser, ParserContext, StatusMap } from "./types.js";

/** Same merge order as the official `MAP_REPO_TO_PARSER` (keys are disjoint, so order is cosmetic). */
export const MAP_REPO_TO_PARSER: Readonly<Record<string, LogParser>> = {
  ...NATIVE_PARSERS,
  ...JAVASCRIPT_PARSERS,
  ...PYTHON_PARSERS,
};

/**
 * Parsers by log format, for repositories outside the official map (evalfleet's own tasks graded by the
 * local backend name one of these). Official repositories always use MAP_REPO_TO_PARSER.
 */
export const PARSERS_BY_FORMAT: Readonly<Record<string, LogParser>> = {
  pytest: parsePytest,
  pytest_options: parsePytestOptions,
  pytest_v2: parsePytestV2,
  django: parseDjango,
  seaborn: parseSeaborn,
  sympy: parseSympy,
  matplotlib: parseMatplotlib,
  calypso: parseCalypso,
  chart_js: parseChartJs,
  marked: parseMarked,
  p5js: parseP5js,
  react_pdf: parseReactPdf,
  jest: parseJest,
  jest_json: parseJestJson,
  vitest: parseVitest,
  karma: parseKarma,
  tap: parseTap,
  redis: parseRedis,
  jq: parseJq,
  doctest: parseDoctest,
  micropython: parseMicropython,
  googletest: parseGoogletest,
  gotest: parseGoTest,
  maven: parseMaven,
  ant: parseAnt,
  gradle_custom: parseGradleCustom,
  phpunit: parsePhpunit,
  minitest: parseMinitest,
  cucumber: parseCucumber,
  ruby_unit: parseRubyUnit,
  rspec_transformed_json: parseRspecTransformedJson,
  cargo: parseCargo,
};
