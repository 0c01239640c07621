import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { Template } from "aws-cdk-lib/assertions";
import { buildApp } from "../../deploy/app.js";
import { HARNESS_CONTAINER, HARNESS_TASK_CONTAINER } from "../../deploy/lib/compute.js";

type Container = {
  Name: string;
  Command?: string[];
  User?: string;
  Essential?: boolean;
  Environment?: Array<{ Name: string; Value: unknown }>;
  Secrets?: Array<{ Name: string }>;
  MountPoints?: Array<{ ContainerPath: string; SourceVolume: string; ReadOnly: boolean }>;
  DependsOn?: Array<{ ContainerName: string; Condition: string }>;
};
type Resource = { Type: string; Properties?: Record<string, unknown> };

const { stack } = buildApp({}, { nag: false, cfnValidation: false });
const resources = Template.fromStack(stack).toJSON().Resources as Record<string, Resource>;
const byType = (t: string) => Object.values(resources).filter((r) => r.Type === t);
const containersOf = (family: string): Container[] =>
  (byType("AWS::ECS::TaskDefinition").find((t) => t.Properties?.Family === family)?.Properties
    ?.ContainerDefinitions ?? []) as Container[];
const env = (c: Container | undefined, name: string) => c?.Environment?.find((e) => e.Name === name)?.Value;

describe("deploy: the harness task has two containers", () => {
  const cs = containersOf("evalfleet-harness");
  const task = cs.find((c) => c.Name === HARNESS_TASK_CONTAINER);
  const harness = cs.find((c) => c.Name === HARNESS_CONTAINER);

  test("a task container (essential, its own user) and a harness container (another user, not essential)", () => {
    assert.equal(cs.length, 2);
    assert.deepEqual(task?.Command, ["task"]);
    assert.equal(task?.Essential, true);
    assert.equal(task?.User, "10001:10001");
    assert.deepEqual(harness?.Command, ["harness-runner", "/attempt"]);
    assert.equal(harness?.Essential, false);
    assert.notEqual(harness?.User?.split(":")[0], task?.User?.split(":")[0]);
    assert.deepEqual(harness?.DependsOn, [{ ContainerName: HARNESS_TASK_CONTAINER, Condition: "START" }]);
  });

  test("the harness container holds no secret and no endpoint; both share only the attempt volume", () => {
    assert.equal(harness?.Secrets, undefined);
    assert.equal(harness?.Environment, undefined);
    for (const c of [task, harness])
      assert.deepEqual(c?.MountPoints, [
        { ContainerPath: "/attempt", SourceVolume: "attempt", ReadOnly: false },
      ]);
    assert.equal(env(task, "EVALFLEET_HARNESS_RUNNER"), "/attempt");
  });
});

describe("deploy: the eval tier", () => {
  test("eval workers run `eval-worker` with the host's docker socket; the Fargate grader-supervisor takes no grade jobs", () => {
    const [worker] = containersOf("evalfleet-eval-worker");
    assert.deepEqual(worker?.Command, ["eval-worker"]);
    assert.deepEqual(worker?.MountPoints, [
      { ContainerPath: "/var/run/docker.sock", SourceVolume: "docker-sock", ReadOnly: false },
    ]);
    const [supervisor] = containersOf("evalfleet-grader-supervisor");
    assert.equal(env(supervisor, "EVALFLEET_GRADE_JOBS"), "none");
    assert.equal(env(supervisor, "EVALFLEET_EVAL_ASG"), "evalfleet-eval-hosts");
  });

  test("the eval workers are a daemon on the eval hosts' capacity", () => {
    const svc = byType("AWS::ECS::Service").find(
      (s) => s.Properties?.ServiceName === "evalfleet-eval-worker",
    );
    assert.equal(svc?.Properties?.SchedulingStrategy, "DAEMON");
  });
});

describe("deploy: the Packer AMI build", () => {
  const hcl = readFileSync(new URL("../../packer/eval-host.pkr.hcl", import.meta.url), "utf8");
  test("the instance profile the template names is made by the stack", () => {
    const name = /iam_instance_profile\s*=\s*"([^"]+)"/.exec(hcl)?.[1];
    assert.ok(name, "eval-host.pkr.hcl names an instance profile");
    const profiles = byType("AWS::IAM::InstanceProfile").map((p) => p.Properties?.InstanceProfileName);
    assert.ok(profiles.includes(name), `the stack makes ${name} (it makes ${profiles.join(", ")})`);
  });

  test("the plugin file the template points at is present and requires the amazon plugin", () => {
    const ref = /(plugins\.pkr\.hcl\.example)/.exec(hcl)?.[1];
    assert.ok(ref);
    const plugins = readFileSync(new URL(`../../packer/${ref}`, import.meta.url), "utf8");
    assert.match(plugins, /required_plugins\s*\{[\s\S]*source\s*=\s*"github\.com\/hashicorp\/amazon"/);
  });
});
