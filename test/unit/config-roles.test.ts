import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { renderConfigDocs } from "../../config/docs.js";
import {
  inspectSettings,
  loadActorSettings,
  loadSettings,
  MASK,
  postgresUrlFromParts,
  ROLE_NAMES,
  SettingsError,
} from "../../config/index.js";

const dir = mkdtempSync(join(tmpdir(), "ef-config-roles-"));
const PG = {
  PGHOST: "db.internal",
  PGPORT: "5433",
  PGUSER: "evalfleet",
  PGPASSWORD: "p@ss:w/rd",
  PGDATABASE: "ef",
};

function refused(fn: () => unknown): { path: string; reason: string }[] {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof SettingsError, String(err));
    return err.issues;
  }
  assert.fail("expected the settings to be refused");
}

describe("the database rule", () => {
  test("a deployed role refuses to start without PostgreSQL, saying what to set", () => {
    for (const role of ["planner", "gateway", "results-writer", "eval-worker", "validate-env"] as const) {
      const issues = refused(() => loadSettings(role, { env: {} }));
      assert.equal(issues.length, 1, role);
      assert.equal(issues[0]!.path, "DATABASE_URL");
      assert.match(issues[0]!.reason, /PGHOST/);
      assert.match(issues[0]!.reason, /--data-dir/);
    }
  });

  test("PG* variables become a postgres URL, password escaped; DATABASE_URL as given", () => {
    const db = loadSettings("planner", { env: PG }).database;
    assert.equal(db.kind, "postgres");
    if (db.kind !== "postgres") return;
    assert.equal(db.url, "postgres://evalfleet:p%40ss%3Aw%2Frd@db.internal:5433/ef");
    assert.ok(!db.label.includes("p@ss"), "the label names the host, never the password");
    const url = "postgres://u@h:1/d";
    assert.deepEqual(loadSettings("gateway", { env: { DATABASE_URL: url } }).database, {
      kind: "postgres",
      url,
      label: "PostgreSQL (DATABASE_URL)",
    });
  });

  test("PGSSLMODE keeps libpq's meaning: require encrypts without checking the certificate", () => {
    assert.match(postgresUrlFromParts({ host: "h", sslMode: "require" }), /sslmode=no-verify/);
    assert.match(postgresUrlFromParts({ host: "h", sslMode: "verify-full" }), /sslmode=verify-full/);
    assert.doesNotMatch(postgresUrlFromParts({ host: "h", sslMode: "disable" }), /sslmode/);
    assert.equal(
      postgresUrlFromParts({ host: "/var/run/postgresql", user: "u" }),
      "postgres://u@/u?host=%2Fvar%2Frun%2Fpostgresql",
    );
  });

  test("both forms at once, or PG* without PGHOST, is refused", () => {
    assert.deepEqual(
      refused(() => loadSettings("planner", { env: { ...PG, DATABASE_URL: "postgres://x/y" } })).map(
        (i) => i.path,
      ),
      ["DATABASE_URL,PGHOST"],
    );
    assert.deepEqual(
      refused(() => loadSettings("planner", { env: { PGUSER: "u" } })).map((i) => i.path),
      ["PGHOST"],
    );
  });

  test("embedded PGlite only where it is explicit or local", () => {
    const explicit = loadSettings("planner", { env: {}, flags: { dataDir: join(dir, "pg") } }).database;
    assert.equal(explicit.kind, "pglite");
    const local = loadSettings("local", { env: {}, flags: { stateDir: join(dir, "state") } }).database;
    assert.deepEqual(local, {
      kind: "pglite",
      dataDir: join(dir, "state", "pglite"),
      label: `embedded PGlite (${join(dir, "state", "pglite")})`,
    });
    // a reader of a local plane's folder that is not there is told where it looked
    const issues = refused(() => loadSettings("report", { env: {}, flags: { stateDir: join(dir, "none") } }));
    assert.match(issues[0]!.reason, /no embedded database at .*none/);
  });
});

describe("roles", () => {
  test("every problem at once, each naming its variable; a bad secret is never quoted", () => {
    const secret = "not-a-seed-but-secret-12345";
    const issues = refused(() =>
      loadSettings("gateway", {
        env: {
          ...PG,
          EVALFLEET_GATEWAY_PORT: "99999",
          EVALFLEET_LOG_LEVEL: "loud",
          NATS_NKEY_SEED: secret,
          PROVIDER_KEYS: "{not json",
        },
      }),
    );
    assert.deepEqual(issues.map((i) => i.path).sort(), [
      "EVALFLEET_GATEWAY_PORT",
      "EVALFLEET_LOG_LEVEL",
      "NATS_NKEY_SEED",
      "PROVIDER_KEYS",
    ]);
    assert.match(
      issues.find((i) => i.path === "EVALFLEET_GATEWAY_PORT")!.reason,
      /at most 65535 \(got "99999"\)/,
    );
    assert.match(issues.find((i) => i.path === "PROVIDER_KEYS")!.reason, /is not JSON/);
    const text = JSON.stringify(issues);
    assert.ok(!text.includes(secret) && !text.includes("{not json"), text);
  });

  test("a flag wins over the environment, which wins over the settings file, which wins over the default", () => {
    const file = join(dir, "settings.yaml");
    writeFileSync(
      file,
      "EVALFLEET_GATEWAY_PORT: 7000\nEVALFLEET_GATEWAY_HOST: 10.0.0.1\nEVALFLEET_LOG_LEVEL: debug\n",
    );
    const env = { ...PG, EVALFLEET_SETTINGS: file, EVALFLEET_GATEWAY_HOST: "0.0.0.0" };
    const s = loadSettings("gateway", { env, flags: { port: "4000" } });
    assert.deepEqual(s.listen, { host: "0.0.0.0", port: 4000 });
    assert.equal(s.log.level, "debug");
    const shown = inspectSettings(["gateway"], { env, flags: { port: "4000" } });
    const src = (v: string) => shown.effective.find((e) => e.env === v)?.source;
    assert.equal(src("EVALFLEET_GATEWAY_PORT"), "flag");
    assert.equal(src("EVALFLEET_GATEWAY_HOST"), "env");
    assert.equal(src("EVALFLEET_LOG_LEVEL"), "file");
    assert.equal(src("NATS_URL"), "default");
    assert.equal(shown.effective.find((e) => e.env === "PGPASSWORD")?.display, MASK);
  });

  test("the gateway: provider keys from PROVIDER_KEYS (the stack's secret), base URLs, static aliases", () => {
    const file = join(dir, "gw.yaml");
    writeFileSync(
      file,
      "aliases:\n  cc__sonnet: { provider: anthropic, model: claude-sonnet-4-5, runs: [r1] }\npools:\n  cc__sonnet: { requests_per_minute: 60 }\n",
    );
    const s = loadSettings("gateway", {
      env: {
        ...PG,
        PROVIDER_KEYS: JSON.stringify({ anthropic: "sk-ant-one", openai: "sk-two" }),
        OPENAI_BASE_URL: "http://litellm:4000/",
        EVALFLEET_GATEWAY_CONFIG: file,
      },
    });
    assert.deepEqual(s.providers, {
      anthropic: { provider: "anthropic", baseUrl: "https://api.anthropic.com", apiKey: "sk-ant-one" },
      openai: { provider: "openai", baseUrl: "http://litellm:4000", apiKey: "sk-two" },
    });
    assert.deepEqual(s.file.aliases.cc__sonnet, {
      upstream: { provider: "anthropic", baseUrl: "https://api.anthropic.com", apiKey: "sk-ant-one" },
      model: "claude-sonnet-4-5",
      runs: ["r1"],
    });
    assert.deepEqual(s.file.pools.cc__sonnet, { limits: { requestsPerMinute: 60 } });
    const issues = refused(() =>
      loadSettings("gateway", { env: { ...PG, EVALFLEET_GATEWAY_CONFIG: file, ANTHROPIC_API_KEY: "" } }),
    );
    assert.match(issues[0]!.path, /aliases\.cc__sonnet/);
    assert.match(issues[0]!.reason, /no anthropic key: set PROVIDER_KEYS/);
  });

  test("the gateway: usage reports from the admin keys (the secret's or the environment's) and alias files", () => {
    const file = join(dir, "gw-usage.yaml");
    writeFileSync(
      file,
      "aliases:\n  a: { provider: anthropic, usage_report: { admin_key_env: MY_ADMIN, api_key_id: apikey_1, lag_seconds: 0 } }\n",
    );
    const s = loadSettings("gateway", {
      env: {
        ...PG,
        PROVIDER_KEYS: JSON.stringify({ anthropic: "sk-ant-one", anthropic_admin: "sk-ant-admin-one" }),
        ANTHROPIC_API_KEY_ID: "apikey_01",
        OPENAI_API_KEY: "sk-two",
        EVALFLEET_GATEWAY_CONFIG: file,
        MY_ADMIN: "sk-ant-admin-two",
      },
    });
    assert.deepEqual(s.providers.anthropic?.usageReport, {
      adminKey: "sk-ant-admin-one",
      apiKeyId: "apikey_01",
      lagMs: 600_000,
    });
    assert.equal(s.providers.openai?.usageReport, undefined, "no admin key: no usage report");
    assert.deepEqual(s.file.aliases.a?.upstream.usageReport, {
      adminKey: "sk-ant-admin-two",
      apiKeyId: "apikey_1",
      lagMs: 0,
    });
    const issues = refused(() =>
      loadSettings("gateway", {
        env: { ...PG, ANTHROPIC_API_KEY: "sk-ant-one", EVALFLEET_GATEWAY_CONFIG: file },
      }),
    );
    assert.match(issues[0]!.reason, /admin_key_env MY_ADMIN is not set/);
  });

  test("EVALFLEET_BACKEND=ecs needs its cluster, task family, subnets and security groups", () => {
    const issues = refused(() => loadSettings("dispatcher", { env: { ...PG, EVALFLEET_BACKEND: "ecs" } }));
    assert.deepEqual(issues.map((i) => i.path).sort(), [
      "EVALFLEET_ECS_CLUSTER",
      "EVALFLEET_HARNESS_TASK_FAMILY",
      "EVALFLEET_TASK_SECURITY_GROUPS",
      "EVALFLEET_TASK_SUBNETS",
    ]);
    const s = loadSettings("dispatcher", {
      env: {
        ...PG,
        EVALFLEET_BACKEND: "ecs",
        EVALFLEET_ECS_CLUSTER: "evalfleet",
        EVALFLEET_HARNESS_TASK_FAMILY: "evalfleet-harness",
        EVALFLEET_TASK_SUBNETS: "subnet-a, subnet-b",
        EVALFLEET_TASK_SECURITY_GROUPS: "sg-1",
      },
    });
    assert.deepEqual(s.backend, {
      kind: "ecs",
      ecs: {
        cluster: "evalfleet",
        taskDefinition: "evalfleet-harness",
        containerName: "task",
        subnets: ["subnet-a", "subnet-b"],
        securityGroups: ["sg-1"],
        capacityProvider: "FARGATE",
      },
    });
  });

  test("a sim dispatcher forwards to the gateway only when told where it is", () => {
    const sim = (env: Record<string, string>) =>
      loadSettings("dispatcher", { env: { ...PG, EVALFLEET_BACKEND: "sim", ...env } }).backend;
    assert.deepEqual(sim({}), { kind: "sim", sim: { calls: 1, thinkMs: 50 } });
    assert.deepEqual(
      sim({ EVALFLEET_GATEWAY_URL: "http://gw:4000", EVALFLEET_SIM_MIX: "PATCH_READY=3,TIMEOUT=1" }),
      {
        kind: "sim",
        sim: {
          calls: 1,
          thinkMs: 50,
          mix: { PATCH_READY: 3, TIMEOUT: 1 },
          upstream: { url: "http://gw:4000" },
        },
      },
    );
    assert.match(refused(() => sim({ EVALFLEET_SIM_MIX: "DONE=1" }))[0]!.reason, /not STATUS=weight/);
  });

  test("the actors of one process share one settings object; each actor's part is there when it runs", () => {
    const s = loadActorSettings(["planner", "judge"], {
      env: { ...PG, EVALFLEET_GATEWAY_URL: "http://gw:4000" },
    });
    assert.ok(s.library, "the planner's library roots");
    assert.deepEqual(s.judge, { gatewayUrl: "http://gw:4000" });
    assert.equal(s.backend, undefined, "no dispatcher here");
  });

  test("the harness task: one name for the gateway it forwards to, its folders, its pacer", () => {
    const s = loadSettings("task", {
      env: {
        EVALFLEET_RUN: "r",
        EVALFLEET_CELL: "c",
        EVALFLEET_ATTEMPT: "3",
        EVALFLEET_GATEWAY_URL: "http://gateway.svc:4000/",
        EVALFLEET_PACER: "fleet",
        EVALFLEET_WORKDIR: "/w",
      },
    });
    assert.equal(s.gatewayUrl.url, "http://gateway.svc:4000");
    assert.equal(s.task.workRoot, "/w");
    assert.equal(s.task.pacer, "fleet");
    assert.equal(s.host.inheritedEnv.EVALFLEET_RUN, "r", "handed on to the harness as it was started");
  });
});

test("docs/configuration.md is what `npm run docs:config` writes from the schema", () => {
  const committed = readFileSync(new URL("../../docs/configuration.md", import.meta.url), "utf8");
  assert.equal(committed, renderConfigDocs(), "run `npm run docs:config` and commit docs/configuration.md");
  for (const r of ROLE_NAMES) assert.ok(committed.includes(`| \`${r}\` |`), r);
});
