import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Match, Template } from "aws-cdk-lib/assertions";
import { buildApp } from "../../deploy/app.js";

type Resources = Record<string, { Type: string; Properties?: Record<string, unknown> }>;

const digest = (c: string) => `sha256:${c.repeat(64)}`;
const { stack } = buildApp(
  { evalHostAmiId: "ami-0123456789abcdef0", images: { harness: digest("a"), "eval-worker": digest("b") } },
  { nag: false, cfnValidation: false },
);
const template = Template.fromStack(stack);
const resources = template.toJSON().Resources as Resources;
const taskDefs = Object.values(resources).filter((r) => r.Type === "AWS::ECS::TaskDefinition");
const family = (f: string) => taskDefs.find((t) => t.Properties?.Family === f);

describe("deploy: ecs", () => {
  test("the eval worker's task definition requires EC2; the harness runs on Fargate", () => {
    assert.deepEqual(family("evalfleet-eval-worker")?.Properties?.RequiresCompatibilities, ["EC2"]);
    assert.deepEqual(family("evalfleet-harness")?.Properties?.RequiresCompatibilities, ["FARGATE"]);
    template.hasResourceProperties("AWS::ECS::Service", {
      SchedulingStrategy: "DAEMON",
      ServiceName: "evalfleet-eval-worker",
    });
  });

  test("every container image is pinned by digest, and the digests come from context", () => {
    const images = taskDefs.flatMap((t) =>
      ((t.Properties?.ContainerDefinitions ?? []) as Array<{ Image: unknown }>).map((c) =>
        JSON.stringify(c.Image),
      ),
    );
    assert.ok(images.length >= 8);
    for (const i of images) assert.match(i, /@sha256:[0-9a-f]{64}/);
    assert.match(JSON.stringify(family("evalfleet-harness")), new RegExp(digest("a")));
    assert.match(JSON.stringify(family("evalfleet-eval-worker")), new RegExp(digest("b")));
  });

  test("eval hosts come from a launch template on the Packer AMI (encrypted, IMDSv2), never a launch configuration", () => {
    assert.equal(
      Object.values(resources).filter((r) => r.Type === "AWS::AutoScaling::LaunchConfiguration").length,
      0,
    );
    template.hasResourceProperties("AWS::EC2::LaunchTemplate", {
      LaunchTemplateName: "evalfleet-eval-host",
      LaunchTemplateData: Match.objectLike({
        ImageId: "ami-0123456789abcdef0",
        MetadataOptions: { HttpTokens: "required" },
        BlockDeviceMappings: [Match.objectLike({ Ebs: Match.objectLike({ Encrypted: true }) })],
      }),
    });
    template.hasResourceProperties("AWS::AutoScaling::AutoScalingGroup", {
      AutoScalingGroupName: "evalfleet-eval-hosts",
      MinSize: "0",
      LaunchTemplate: Match.anyValue(),
    });
    template.hasResourceProperties("AWS::ECS::CapacityProvider", {
      AutoScalingGroupProvider: Match.objectLike({
        ManagedScaling: Match.objectLike({ Status: "DISABLED" }),
      }),
    });
  });

  test("actors and the gateway are Fargate services; Aurora is Serverless v2, encrypted", () => {
    for (const name of ["planner", "dispatcher", "results-writer", "grader-supervisor", "judge", "gateway"]) {
      template.hasResourceProperties("AWS::ECS::Service", {
        ServiceName: `evalfleet-${name}`,
        LaunchType: "FARGATE",
      });
    }
    template.hasResourceProperties("AWS::RDS::DBCluster", {
      Engine: "aurora-postgresql",
      StorageEncrypted: true,
      ServerlessV2ScalingConfiguration: Match.anyValue(),
    });
    template.hasResourceProperties("AWS::RDS::DBInstance", { DBInstanceClass: "db.serverless" });
  });

  test("the harness task role has no permissions; the dispatcher may only run/stop/describe tasks in this cluster", () => {
    const harness = family("evalfleet-harness");
    const role = ((harness?.Properties?.TaskRoleArn ?? { "Fn::GetAtt": [""] }) as { "Fn::GetAtt": [string] })[
      "Fn::GetAtt"
    ][0];
    const policiesOnRole = Object.values(resources).filter(
      (r) => r.Type === "AWS::IAM::Policy" && JSON.stringify(r.Properties?.Roles).includes(role),
    );
    assert.deepEqual(policiesOnRole, []);
    const dispatcher = Object.values(resources).find(
      (r) => r.Type === "AWS::IAM::Policy" && String(r.Properties?.PolicyName).includes("DispatcherPolicy"),
    );
    const actions = (
      (dispatcher?.Properties?.PolicyDocument ?? { Statement: [] }) as {
        Statement: Array<{ Action: string | string[] }>;
      }
    ).Statement.flatMap((s) => s.Action);
    assert.deepEqual([...new Set(actions)].sort(), [
      "ecs:DescribeTasks",
      "ecs:ListTasks",
      "ecs:RunTask",
      "ecs:StopTask",
      "ecs:TagResource",
      "iam:PassRole",
    ]);
  });

  test("the nightly guard: a scheduled inline Lambda that stops old harness tasks and zeroes the eval tier", () => {
    template.hasResourceProperties("AWS::Events::Rule", {
      ScheduleExpression: "cron(0 4 * * ? *)",
      Targets: Match.arrayWith([
        Match.objectLike({
          Input: Match.serializedJson(
            Match.objectLike({
              cluster: "evalfleet",
              asgName: "evalfleet-eval-hosts",
              maxAgeHours: Match.anyValue(),
            }),
          ),
        }),
      ]),
    });
    template.hasResourceProperties("AWS::Lambda::Function", {
      Code: { ZipFile: Match.stringLikeRegexp("StopTaskCommand[\\s\\S]*UpdateAutoScalingGroupCommand") },
    });
  });

  test("bad context is refused at synth time", () => {
    assert.throws(
      () => buildApp({ images: { harness: "latest" } }, { nag: false, cfnValidation: false }),
      /sha256 digest/,
    );
    assert.throws(
      () => buildApp({ evalHostAmiId: "my-ami" }, { nag: false, cfnValidation: false }),
      /AMI id/,
    );
  });
});
