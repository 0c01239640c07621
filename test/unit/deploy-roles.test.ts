/**
 * The stack and the code agree: every container in the synthesised template gets exactly the settings its role's
 * config schema (config/roles.ts, `deployed`) requires, secrets from Secrets Manager, and nothing that no code
 * reads. A container's role is its command (`actor planner`, `gateway`, `eval-worker`, `task`, `harness-runner`).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Template } from "aws-cdk-lib/assertions";
import { ROLES, type Role, type RoleName } from "../../config/index.js";
import type { AnyGroup, Setting } from "../../config/setting.js";
import { buildApp } from "../../deploy/app.js";

type Container = {
  Name: string;
  Command?: string[];
  Environment?: Array<{ Name: string; Value: unknown }>;
  Secrets?: Array<{ Name: string; ValueFrom: unknown }>;
};
type Resource = { Type: string; Properties?: Record<string, unknown> };

const digest = (c: string) => `sha256:${c.repeat(64)}`;
const { stack } = buildApp(
  {
    evalHostAmiId: "ami-0123456789abcdef0",
    images: { harness: digest("a"), "eval-worker": digest("b") },
    providerBaseUrls: { anthropic: "https://api.anthropic.example", openai: "https://api.openai.example" },
  },
  { nag: false, cfnValidation: false },
);
const resources = Template.fromStack(stack).toJSON().Resources as Record<string, Resource>;
const containers = Object.values(resources)
  .filter((r) => r.Type === "AWS::ECS::TaskDefinition")
  .flatMap((t) =>
    ((t.Properties?.ContainerDefinitions ?? []) as Container[]).map((c) => ({
      family: String(t.Properties?.Family),
      c,
    })),
  );

/** The role a container runs as, from its command; null for a process that reads no settings at all. */
function roleOf(command: string[] | undefined): RoleName | null {
  const [verb, arg] = command ?? [];
  if (verb === "actor" && arg && arg in ROLES) return arg as RoleName;
  if (verb === "harness-runner") return null;
  if (verb && verb in ROLES) return verb as RoleName;
  throw new Error(`a container runs \`${(command ?? []).join(" ")}\`, which is no role in config/roles.ts`);
}

function settingsOf(role: RoleName): Map<string, Setting> {
  const out = new Map<string, Setting>();
  for (const g of Object.values((ROLES[role] as Role).groups) as AnyGroup[])
    for (const s of Object.values(g.settings) as Setting[]) out.set(s.env, s);
  return out;
}

const given = (c: Container) => [
  ...(c.Environment ?? []).map((e) => ({ name: e.Name, secret: false })),
  ...(c.Secrets ?? []).map((s) => ({ name: s.Name, secret: true })),
];

describe("deploy: the template against the role schemas", () => {
  test("every container runs a role, and every role the stack must run has a container", () => {
    const roles = new Set(containers.map(({ c }) => roleOf(c.Command)));
    const deployed = (Object.keys(ROLES) as RoleName[]).filter((r) => (ROLES[r] as Role).deployed);
    for (const r of deployed) assert.ok(roles.has(r), `no container in the template runs the ${r} role`);
  });

  for (const { family, c } of containers) {
    const role = roleOf(c.Command);
    const where = `${family}/${c.Name} (${role ?? "no settings"})`;

    test(`${where}: gets every setting its role requires, each from where it belongs`, () => {
      if (role === null)
        return assert.deepEqual(given(c), [], `${where} reads no settings but is given some`);
      const deployed = (ROLES[role] as Role).deployed;
      assert.ok(deployed, `${where}: the role ${role} says nothing of what a deployed container needs`);
      const names = new Set(given(c).map((g) => g.name));
      const missing = deployed.requires
        .map((r) => (Array.isArray(r) ? r : [r]))
        .filter((alts) => !alts.some((a) => names.has(a)))
        .map((alts) => alts.join(" or "));
      assert.deepEqual(missing, [], `${where} is not given what its role requires`);
      const perLaunch = (deployed.perLaunch ?? []).filter((v) => names.has(v));
      assert.deepEqual(perLaunch, [], `${where}: given in the task definition, but belongs to each launch`);
    });

    test(`${where}: gets nothing that no code reads, and every secret from Secrets Manager`, () => {
      if (role === null) return;
      const schema = settingsOf(role);
      const unread = given(c)
        .filter((g) => !schema.has(g.name))
        .map((g) => g.name);
      assert.deepEqual(unread, [], `${where} is given variables its role's schema does not read`);
      const inPlain = given(c)
        .filter((g) => !g.secret && schema.get(g.name)?.secret)
        .map((g) => g.name);
      assert.deepEqual(inPlain, [], `${where} carries secrets in plain environment`);
      const notFromSecretsManager = (c.Secrets ?? [])
        .filter((s) => {
          const refs = [...JSON.stringify(s.ValueFrom).matchAll(/"Ref":"([^"]+)"/g)].map((m) => m[1]!);
          return (
            refs.length === 0 || !refs.every((r) => resources[r]?.Type.startsWith("AWS::SecretsManager::"))
          );
        })
        .map((s) => s.Name);
      assert.deepEqual(
        notFromSecretsManager,
        [],
        `${where}: secrets from somewhere other than Secrets Manager`,
      );
    });
  }
});
