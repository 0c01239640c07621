import type { Command } from "commander";
import { inspectSettings, ROLE_NAMES, ROLES, type RoleName } from "../../config/index.js";
import { table } from "../../lib/table.js";
import { ErrorCode, EvalfleetError, formatIssues } from "../../protocol/errors.js";
import { printJson } from "./output.js";

/**
 * `evalfleet config [--role R] [--json]`: the settings a process of role R would start with here — each variable
 * (and flag), its value (secrets masked, URL passwords redacted) and where it came from — and every problem, the
 * same ones the process would refuse to start with. Exits 2 when there is a problem, so it works as a preflight.
 */
export function register(program: Command): void {
  program
    .command("config")
    .description(
      "Print the effective settings of a role (what a process would start with here), secrets masked",
    )
    .option(
      "--role <role...>",
      `the role(s) of one process (actors may be combined): ${ROLE_NAMES.join(", ")}`,
    )
    .option("--json", "print one JSON object")
    .action((opts: { role?: string[]; json?: boolean }) => {
      const asked = (opts.role ?? []).flatMap((r) => r.split(",")).filter(Boolean);
      if (asked.length === 0) {
        if (opts.json) printJson({ roles: ROLE_NAMES.map((r) => ({ role: r, doc: ROLES[r].doc })) });
        else
          process.stdout.write(
            `${table(
              ["ROLE", "WHAT"],
              ROLE_NAMES.map((r) => [r, ROLES[r].doc]),
            )}\n\nshow one with: evalfleet config --role <role>\n`,
          );
        return;
      }
      const unknown = asked.filter((r) => !(ROLE_NAMES as string[]).includes(r));
      if (unknown.length > 0)
        throw new EvalfleetError(
          ErrorCode.InvalidConfig,
          `unknown role ${unknown.join(", ")}; roles: ${ROLE_NAMES.join(", ")}`,
        );
      const r = inspectSettings(asked as RoleName[]);
      if (opts.json)
        printJson({
          role: r.role,
          valid: r.issues.length === 0,
          settings: r.effective.map((e) => ({
            variable: e.env,
            ...(e.flag ? { flag: `--${e.flag}` } : {}),
            value: e.display ?? null,
            source: e.source,
            secret: e.secret,
            group: e.group,
          })),
          issues: r.issues,
        });
      else {
        const rows = r.effective.map((e) => [e.env, e.flag ? `--${e.flag}` : "", e.display ?? "", e.source]);
        process.stdout.write(
          `settings of ${r.role}\n\n${table(["VARIABLE", "FLAG", "VALUE", "SOURCE"], rows)}\n`,
        );
        if (r.issues.length > 0)
          process.stdout.write(
            `\n${r.issues.length} problem${r.issues.length === 1 ? "" : "s"} (a ${r.role} process would refuse to start):\n${formatIssues(r.issues)}\n`,
          );
      }
      if (r.issues.length > 0) process.exitCode = 2;
    });
}
