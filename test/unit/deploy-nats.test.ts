import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Match, Template } from "aws-cdk-lib/assertions";
import { buildApp } from "../../deploy/app.js";
import { deployedNatsAuth } from "../../deploy/lib/nats.js";
import {
  natsAuthorization,
  natsServerConfig,
  renderNatsConf,
  type TaskIdentity,
  taskInboxPrefix,
  taskPermissions,
} from "../../deploy/lib/nats-auth.js";
import { ProgressKeys, Subjects } from "../../protocol/subjects.js";
import { subjectMatches } from "../helpers/nats.js";

const me: TaskIdentity = {
  run: "run:1",
  cell: "astropy__astropy-12907",
  attempt: 2,
  pool: "claude__sonnet",
  task: "astropy__astropy-12907",
};
const other: TaskIdentity = { ...me, cell: "django__django-11099", task: "django__django-11099" };
const NKEY = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4";

const allowed = (list: string[], subject: string) => list.some((p) => subjectMatches(p, subject));

describe("deploy: NATS authorization", () => {
  test("a task may publish only to its own attempt's subjects", () => {
    const { publish } = taskPermissions(me);
    assert.ok(allowed(publish.allow, Subjects.ledger.one(me.run, me.cell)), "own ledger");
    assert.ok(allowed(publish.allow, Subjects.attempts.one(me.run, me.cell)), "own attempt result");
    assert.ok(
      allowed(publish.allow, `$KV.progress.${ProgressKeys.cell(me.run, me.cell)}`),
      "own progress key",
    );
    for (const s of [
      Subjects.ledger.one(other.run, other.cell),
      Subjects.attempts.one(other.run, other.cell),
      `$KV.progress.${ProgressKeys.cell(other.run, other.cell)}`,
      `$KV.progress.${ProgressKeys.run(me.run)}`,
      `$KV.budgets.run.${me.run}`,
      Subjects.cells.one(me.run, me.pool),
      Subjects.runSubmit,
      "grade.jobs.x",
      "$JS.API.STREAM.DELETE.EF_LEDGER",
      "$JS.API.DIRECT.GET.KV_jobs.$KV.jobs.run=3A1.django__django-11099",
    ]) {
      assert.ok(!allowed(publish.allow, s), `task must not publish ${s}`);
    }
    assert.ok(
      publish.allow.every((p) => !p.includes("*") && !p.endsWith(">")),
      "no wildcards in a task's publish list",
    );
  });

  test("a task subscribes only to its own inbox and its own attempt's signal", () => {
    const { subscribe } = taskPermissions(me);
    assert.ok(allowed(subscribe.allow, `${taskInboxPrefix(me)}.abc123`));
    assert.ok(allowed(subscribe.allow, Subjects.attemptSignal(me.run, me.cell, me.attempt)));
    assert.ok(!allowed(subscribe.allow, `${taskInboxPrefix(other)}.abc123`), "another task's inbox");
    assert.ok(!allowed(subscribe.allow, "_INBOX.abc"), "the shared inbox namespace");
    assert.ok(!allowed(subscribe.allow, Subjects.attemptSignal(me.run, me.cell, me.attempt + 1)));
    assert.ok(!allowed(subscribe.allow, Subjects.ledger.all));
  });

  test("three accounts; tasks reach ACTORS' JetStream only through the subjects ACTORS exports", () => {
    const auth = natsAuthorization({
      actors: [{ user: "planner", password: { env: "P" } }],
      gateway: [{ user: "gateway", password: { env: "G" } }],
      tasks: [{ task: me, nkey: NKEY }],
    }) as {
      accounts: Record<
        string,
        {
          users: Array<Record<string, unknown>>;
          jetstream?: string;
          exports?: unknown[];
          imports?: unknown[];
        }
      >;
    };
    assert.deepEqual(Object.keys(auth.accounts).sort(), ["ACTORS", "GATEWAY", "TASKS"]);
    assert.equal(auth.accounts.ACTORS?.jetstream, "enabled");
    assert.equal(
      auth.accounts.TASKS?.jetstream,
      undefined,
      "tasks cannot create or read streams of their own",
    );
    const user = auth.accounts.TASKS?.users[0];
    assert.equal(user?.nkey, NKEY);
    assert.deepEqual(user?.permissions, taskPermissions(me));
    const text = renderNatsConf(auth as unknown as Record<string, unknown>);
    assert.match(text, /password: \$P\n/, "passwords are environment references, not literals");
    assert.doesNotMatch(text, /"\$P"/);
  });

  test("server config: clustered JetStream with authenticated routes, accounts included from a file", () => {
    const conf = natsServerConfig({
      serverName: "nats-0",
      peers: ["a", "b", "c"],
      storeDir: "/data/js",
      maxFileStore: 1e9,
      authFile: "/etc/nats/auth.conf",
      routePassword: "pw",
    });
    assert.match(conf, /jetstream: \{\n {2}store_dir: "\/data\/js"/);
    assert.match(conf, /nats-route:\/\/route:pw@c:6222/);
    assert.match(conf, /include "\/etc\/nats\/auth\.conf"\n$/);
  });

  test("the deployed cluster: three nodes, each with its own encrypted, retained data volume, given the generated auth", () => {
    const { stack } = buildApp({}, { nag: false, cfnValidation: false });
    const template = Template.fromStack(stack);
    const resources = template.toJSON().Resources as Record<
      string,
      { Type: string; Properties?: Record<string, unknown>; DeletionPolicy?: string }
    >;
    const volumes = Object.values(resources).filter((r) => r.Type === "AWS::EC2::Volume");
    assert.equal(volumes.length, 3);
    for (const v of volumes) {
      assert.equal(v.Properties?.Encrypted, true);
      assert.equal(v.DeletionPolicy, "Retain");
    }
    template.resourceCountIs("AWS::EC2::VolumeAttachment", 3);
    const nodes = Object.values(resources).filter((r) => r.Type === "AWS::EC2::Instance");
    assert.equal(nodes.length, 3);
    const userData = JSON.stringify(nodes[0]?.Properties?.UserData);
    assert.ok(
      userData.includes(JSON.stringify(deployedNatsAuth()).slice(1, 200)),
      "user data carries the generated accounts",
    );
    template.hasResourceProperties("AWS::Route53::RecordSet", {
      Name: Match.stringLikeRegexp("^nats-2\\.nats\\.evalfleet\\.internal"),
    });
  });
});
