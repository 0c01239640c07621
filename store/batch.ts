import { nanoToUsd } from "../protocol/money.js";
import type { Db } from "./db.js";
import { quote } from "./migrations/types.js";

/** PostgreSQL's wire protocol counts bind parameters in an Int16: one statement carries at most 65535. */
export const MAX_PARAMS = 65535;
/** Rows per statement even when more parameters would fit: bounds statement size and per-batch latency. */
export const MAX_ROWS_PER_STATEMENT = 5000;

/** How a JS value becomes a bind parameter, and the SQL cast that types it on both drivers. */
export type Kind = "text" | "int" | "bigint" | "float" | "usd" | "json" | "jsontext" | "bool" | "ts";

const CAST: Record<Kind, string> = {
  text: "text",
  int: "integer",
  bigint: "bigint",
  float: "double precision",
  usd: "numeric",
  json: "jsonb",
  jsontext: "text", // JSON kept in a TEXT column (the seed's harness_metadata)
  bool: "boolean",
  ts: "timestamptz",
};

/** One column of a batched write: the row field it comes from, the column it goes to, and its kind. */
export interface Col<R> {
  field: keyof R & string;
  column: string;
  kind: Kind;
}

/** A column of a batched write; the row type comes from the list it stands in (`readonly Col<Row>[]`). */
export const col = <R>(field: keyof R & string, column: string, kind: Kind): Col<R> => ({
  field,
  column,
  kind,
});

export function toParam(kind: Kind, v: unknown): unknown {
  if (v === undefined || v === null) return null;
  switch (kind) {
    case "usd": // integer nano-USD in code, exact decimal text on the wire
      return nanoToUsd(v as number | bigint);
    case "json":
    case "jsontext":
      return typeof v === "string" ? v : JSON.stringify(v);
    case "ts":
      return v instanceof Date ? v.toISOString() : v;
    case "bigint":
      return typeof v === "bigint" ? v.toString() : v;
    default:
      return v;
  }
}

/** Split rows so each statement stays under both the parameter limit and MAX_ROWS_PER_STATEMENT. */
export function chunkRows<T>(rows: readonly T[], paramsPerRow: number, fixedParams = 0): T[][] {
  const size = Math.max(
    1,
    Math.min(MAX_ROWS_PER_STATEMENT, Math.floor((MAX_PARAMS - fixedParams) / paramsPerRow)),
  );
  const out: T[][] = [];
  for (let i = 0; i < rows.length; i += size) out.push(rows.slice(i, i + size));
  return out;
}

/**
 * Multi-row `INSERT INTO table (cols) VALUES (...), (...) <tail>` in as few statements as the limits allow, all in
 * one transaction. Every parameter is cast, so untyped NULLs resolve the same on pg and PGlite. Returns the sum of
 * affected rows (for ON CONFLICT DO NOTHING: how many were new).
 */
export async function insertBatched<R>(
  db: Db,
  table: string,
  cols: readonly Col<R>[],
  rows: readonly R[],
  tail: string,
): Promise<number> {
  if (rows.length === 0) return 0;
  const colList = cols.map((c) => quote(c.column)).join(", ");
  const batches = chunkRows(rows, cols.length);
  const write = async (tx: Db) => {
    let affected = 0;
    for (const batch of batches) {
      const params: unknown[] = [];
      const tuples = batch.map((row) => {
        const cells = cols.map((c) => {
          params.push(toParam(c.kind, row[c.field]));
          return `$${params.length}::${CAST[c.kind]}`;
        });
        return `(${cells.join(",")})`;
      });
      const r = await tx.query(
        `INSERT INTO ${table} (${colList}) VALUES ${tuples.join(",")} ${tail}`,
        params,
      );
      affected += r.rowCount;
    }
    return affected;
  };
  return batches.length === 1 ? write(db) : db.transaction(write);
}
