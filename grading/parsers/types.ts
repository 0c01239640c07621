/** A test-name → status map, in first-seen order (a Python dict, so later writes keep the first position). */
export type StatusMap = Map<string, string>;

/** What a parser may read besides the log; only instance-specific parsers (jekyll, immutable-js) use it. */
export interface ParserContext {
  instance_id: string;
}

/** One official log parser: `parse_log_*(log, test_spec)`. */
export type LogParser = (log: string, ctx: ParserContext) => StatusMap;
