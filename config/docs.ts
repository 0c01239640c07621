import { BENCH_GROUPS } from "./bench.js";
import { ROLE_NAMES, ROLES, type Role, type RoleName } from "./roles.js";
import type { AnyGroup, Setting } from "./setting.js";

/**
 * docs/configuration.md, generated from the role schemas (`npm run docs:config`); a test fails when the committed
 * file differs, so the table cannot drift from the code.
 */

function cell(text: string): string {
  return text.replace(/\|/g, "\\|").replace(/\n/g, " ");
}

function defaultOf(s: Setting): string {
  if (s.default !== undefined) return `\`${s.default}\``;
  if (s.defaultDoc !== undefined) return cell(s.defaultDoc);
  return "";
}

interface Row {
  setting: Setting;
  roles: RoleName[];
}

/**
 * Every variable with the roles that read it: one row per meaning (a variable whose default or meaning differs
 * between roles, such as the log level, has a row for each).
 */
function variables(): Map<string, Row> {
  const rows = new Map<string, Row>();
  for (const r of ROLE_NAMES)
    for (const g of Object.values((ROLES[r] as Role).groups) as AnyGroup[])
      for (const s of Object.values(g.settings) as Setting[]) {
        const key = `${s.env}\u0000${defaultOf(s)}\u0000${s.doc}`;
        const row = rows.get(key);
        if (row) {
          if (!row.roles.includes(r)) row.roles.push(r);
        } else rows.set(key, { setting: s, roles: [r] });
      }
  return rows;
}

export function renderConfigDocs(): string {
  const out: string[] = [];
  out.push("# Configuration");
  out.push("");
  out.push(
    "<!-- Generated from config/ by `npm run docs:config`; do not edit by hand (a test compares this file with the schema). -->",
  );
  out.push("");
  out.push(
    "Every evalfleet process reads its settings once, at start, from one typed schema per role (`config/`): CLI flags " +
      "over environment variables over a settings file (`EVALFLEET_SETTINGS=path.yaml`, a mapping of the same " +
      "variable names) over the defaults below. An empty variable counts as unset. A process whose settings are " +
      "wrong refuses to start and names every problem (the variable or flag, where it came from, what to do), " +
      "never a secret's value. `evalfleet config --role <role>` prints what a process of that role would start " +
      "with here, secrets masked, and exits 2 when it would refuse.",
  );
  out.push("");
  out.push(
    "Command arguments that say what to do (`report RUN --format csv`) stay with their command (`--help`).",
  );
  out.push("");
  out.push("## The database rule");
  out.push("");
  out.push(
    "A process that shares state with others — every actor, the gateway, `eval-worker`, `validate-env` — uses " +
      "PostgreSQL (`DATABASE_URL`, or `PGHOST` with `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`) " +
      "and refuses to start without it: it never falls back to an embedded database whose rows would vanish with " +
      "its container. Embedded PGlite is only for the local launcher (`up`, `start`: under `<state-dir>/pglite`), " +
      "for commands given an embedded folder explicitly (`--data-dir DIR`), and for readers (`report`, " +
      "`dashboard`) of a local plane's `--state-dir`.",
  );
  out.push("");
  out.push("## Roles");
  out.push("");
  out.push("| role | what runs with it |");
  out.push("| --- | --- |");
  for (const r of ROLE_NAMES) out.push(`| \`${r}\` | ${cell(ROLES[r].doc)} |`);
  out.push("");
  out.push("## Variables");
  out.push("");
  out.push("Secret settings are never printed or quoted; in the stack they come from Secrets Manager.");
  out.push("");
  out.push("| variable | flag | default | secret | what | roles |");
  out.push("| --- | --- | --- | --- | --- | --- |");
  const rows = [...variables().values()].sort((a, b) => a.setting.env.localeCompare(b.setting.env));
  for (const { setting: s, roles } of rows) {
    const env = s.env;
    const flags = roles
      .map((r) => (s.flag && ((ROLES[r] as Role).flags ?? []).includes(s.flag) ? `--${s.flag}` : null))
      .filter((f): f is string => f !== null);
    const flag = flags.length > 0 ? `\`${flags[0]}\`` : "";
    out.push(
      `| \`${env}\` | ${flag} | ${defaultOf(s)} | ${s.secret ? "yes" : ""} | ${cell(s.doc)} | ${roles.join(", ")} |`,
    );
  }
  out.push("");
  out.push("## Benchmarks");
  out.push("");
  out.push(
    "The benchmarks (`npm run bench:*`, `bench/`) read their knobs the same way, once at start; no shipped " +
      "process reads them. A variable marked as set by the bench is how a bench hands a value to its own children.",
  );
  out.push("");
  out.push("| variable | default | what | bench |");
  out.push("| --- | --- | --- | --- |");
  for (const g of Object.values(BENCH_GROUPS) as AnyGroup[])
    for (const s of Object.values(g.settings) as Setting[])
      out.push(
        `| \`${s.env}\` | ${defaultOf(s)} | ${cell(s.doc)} | ${cell(g.name.replace(/^bench-/, ""))} |`,
      );
  out.push("");
  return `${out.join("\n")}`;
}
