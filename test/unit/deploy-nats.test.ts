import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { decode } from "@nats-io/jwt";
import { Match, Template } from "aws-cdk-lib/assertions";
import { buildApp } from "../../deploy/app.js";
import { deployedNatsSecrets, natsServerConfig } from "../../deploy/lib/nats-auth.js";
import { type AttemptIdentity, attemptPermissions, createNatsAccounts } from "../../plane/nats-auth.js";
import { ApiSubjects, ProgressKeys, StateKeys, Subjects } from "../../protocol/subjects.js";
import { subjectMatches } from "../helpers/nats.js";

const me: AttemptIdentity = {
  run: "run:1",
  cell: "astropy__astropy-12907",
  attempt: 2,
  task: "astropy__astropy-12907",
};
const other: AttemptIdentity = { ...me, cell: "django__django-11099", task: "django__django-11099" };

const allowed = (list: string[], subject: string) => list.some((p) => subjectMatches(p, subject));

describe("NATS: an attempt user's permissions", () => {
  test("it may publish only its own attempt's subjects and read only its own job keys", () => {
    const { publish } = attemptPermissions(me);
    for (const s of [
      Subjects.ledger.one(me.run, me.cell, me.attempt),
      Subjects.attempts.one(me.run, me.cell, me.attempt),
      Subjects.attemptSignal(me.run, me.cell, me.attempt),
      ApiSubjects.kvKey("progress", ProgressKeys.cell(me.run, me.cell)),
      ApiSubjects.kvDirectGet("jobs", StateKeys.job(me.run, me.cell)),
      ApiSubjects.kvDirectGet("jobs", StateKeys.jobRun(me.run)),
      ApiSubjects.kvDirectGet("jobs", StateKeys.jobTask(me.run, me.task)),
      ApiSubjects.kvDirectGet("jobs", StateKeys.attemptKey(me.run, me.cell, me.attempt)),
      ApiSubjects.objectChunks("blobs", ApiSubjects.attemptChunkId(me.run, me.cell, me.attempt, "NUID123")),
    ])
      assert.ok(allowed(publish, s), `own: ${s}`);
    for (const s of [
      Subjects.ledger.one(me.run, me.cell, me.attempt + 1),
      Subjects.attempts.one(me.run, me.cell, me.attempt + 1),
      Subjects.ledger.one(other.run, other.cell, other.attempt),
      Subjects.attempts.one(other.run, other.cell, other.attempt),
      ApiSubjects.kvKey("progress", ProgressKeys.cell(other.run, other.cell)),
      ApiSubjects.kvKey("progress", ProgressKeys.run(me.run)),
      ApiSubjects.kvKey("budgets", StateKeys.budget(me.run)),
      ApiSubjects.kvDirectGet("jobs", StateKeys.attemptKey(me.run, me.cell, me.attempt + 1)),
      ApiSubjects.kvDirectGet("jobs", StateKeys.job(other.run, other.cell)),
      ApiSubjects.kvMsgGet("jobs"),
      ApiSubjects.objectChunks(
        "blobs",
        ApiSubjects.attemptChunkId(other.run, other.cell, other.attempt, "N"),
      ),
      ApiSubjects.objectChunks("blobs", "NUID123"),
      Subjects.cells.one(me.run, "p"),
      Subjects.runSubmit,
      "grade.jobs.x",
      "$JS.API.STREAM.DELETE.EF_LEDGER",
      "$JS.API.STREAM.MSG.GET.OBJ_blobs",
    ])
      assert.ok(!allowed(publish, s), `must not publish ${s}`);
    assert.ok(
      publish.every((p) => !p.endsWith(">") && p.split(".").filter((t) => t === "*").length <= 1),
      "no > anywhere; one * only in the chunk subject's last token",
    );
  });

  test("it subscribes only to its own inbox prefix and its own attempt's signal", () => {
    const { subscribe } = attemptPermissions(me);
    const inbox = ApiSubjects.attemptInbox(me.run, me.cell, me.attempt);
    assert.ok(allowed(subscribe, `${inbox}.abc123.1`));
    assert.ok(allowed(subscribe, Subjects.attemptSignal(me.run, me.cell, me.attempt)));
    assert.ok(!allowed(subscribe, `${ApiSubjects.attemptInbox(other.run, other.cell, other.attempt)}.abc`));
    assert.ok(!allowed(subscribe, "_INBOX.abc"), "the shared inbox namespace");
    assert.ok(!allowed(subscribe, Subjects.attemptSignal(me.run, me.cell, me.attempt + 1)));
    assert.ok(!allowed(subscribe, Subjects.ledger.all));
  });
});

describe("deploy: NATS in operator mode", () => {
  test("the secrets: the servers' auth lines, a plane user of the account, the account's signing key", async () => {
    const accounts = await createNatsAccounts();
    const s = await deployedNatsSecrets(accounts);
    assert.match(s.serverAuth, /^operator: /m);
    assert.match(s.serverAuth, /^resolver: MEMORY$/m);
    assert.ok(s.serverAuth.includes(accounts.account.jwt) && s.serverAuth.includes(accounts.system.jwt));
    assert.doesNotMatch(s.serverAuth, /\bS[OAU][A-Z2-7]{56}\b/, "no seed in what the servers get");
    const plane = decode<{ issuer_account?: string }>(s.plane.jwt);
    assert.equal(plane.nats.issuer_account, accounts.account.publicKey);
    assert.match(s.plane.seed, /^SU/);
    assert.equal(s.signer.account, accounts.account.publicKey);
    assert.equal(s.signer.signingKey, accounts.signingSeed);
  });

  test("server config: clustered JetStream with authenticated routes, accounts included from a file", () => {
    const conf = natsServerConfig({
      serverName: "nats-0",
      peers: ["a", "b", "c"],
      storeDir: "/data/js",
      maxFileStore: 1e9,
      authFile: "auth.conf",
      routePassword: "pw",
    });
    assert.match(conf, /jetstream: \{\n {2}store_dir: "\/data\/js"/);
    assert.match(conf, /nats-route:\/\/route:pw@c:6222/);
    // nats-server joins an include path to the including file's folder: a name beside nats.conf.
    assert.match(conf, /include "auth\.conf"\n$/);
  });

  test("the deployed cluster: three nodes, each with its own encrypted, retained data volume, given the operator-mode auth from a secret", () => {
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
    assert.match(userData, /auth\.conf/, "user data writes the operator-mode auth from its secret");
    assert.doesNotMatch(userData, /NATS_ACTORS_PASSWORD|password: \$/, "no role passwords any more");
    template.hasResourceProperties("AWS::Route53::RecordSet", {
      Name: Match.stringLikeRegexp("^nats-2\\.nats\\.evalfleet\\.internal"),
    });
  });
});
