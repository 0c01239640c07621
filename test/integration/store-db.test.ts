import assert from "node:assert/strict";
import { test } from "node:test";
import { toEvalfleetError } from "../../protocol/errors.js";
import { freshPostgres } from "../helpers/db.js";

test("a transaction whose connection dies between statements rejects as retryable; the process lives on", async () => {
  const f = await freshPostgres("store_db_conn");
  try {
    const err = await f.db
      .transaction(async (tx) => {
        const r = await tx.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
        // As when PostgreSQL restarts: the server ends the connection while the transaction holds it, idle.
        await f.db.query("SELECT pg_terminate_backend($1)", [r.rows[0]?.pid]);
        await new Promise((resolve) => setTimeout(resolve, 300));
        await tx.query("SELECT 1");
      })
      .then(
        () => null,
        (e: unknown) => e,
      );
    assert.ok(err, "the transaction fails");
    assert.equal(toEvalfleetError(err).retryable, true, String(err));
    const again = await f.db.query<{ one: number }>("SELECT 1 AS one");
    assert.equal(again.rows[0]?.one, 1, "the pool still serves");
  } finally {
    await f.cleanup();
  }
});
