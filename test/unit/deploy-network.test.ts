import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Template } from "aws-cdk-lib/assertions";
import { buildApp } from "../../deploy/app.js";

type Resources = Record<string, { Type: string; Properties?: Record<string, unknown> }>;

const { stack } = buildApp({}, { nag: false, cfnValidation: false });
const template = Template.fromStack(stack);
const resources = template.toJSON().Resources as Resources;

const ref = (v: unknown): string | undefined => (v as { Ref?: string } | undefined)?.Ref;

/** Route tables of the subnets in one subnet group (by the tag CDK puts on each subnet). */
function routeTablesOf(group: string): Set<string> {
  const subnets = Object.entries(resources)
    .filter(([, r]) => r.Type === "AWS::EC2::Subnet")
    .filter(([, r]) =>
      ((r.Properties?.Tags ?? []) as Array<{ Key: string; Value: string }>).some(
        (t) => t.Key === "aws-cdk:subnet-name" && t.Value === group,
      ),
    )
    .map(([id]) => id);
  assert.ok(subnets.length >= 2, `subnet group ${group} has subnets in two AZs`);
  return new Set(
    Object.values(resources)
      .filter(
        (r) =>
          r.Type === "AWS::EC2::SubnetRouteTableAssociation" &&
          subnets.includes(ref(r.Properties?.SubnetId) ?? ""),
      )
      .map((r) => ref(r.Properties?.RouteTableId) ?? ""),
  );
}

function defaultRoutes(tables: Set<string>): unknown[] {
  return Object.values(resources).filter(
    (r) =>
      r.Type === "AWS::EC2::Route" &&
      tables.has(ref(r.Properties?.RouteTableId) ?? "") &&
      (r.Properties?.DestinationCidrBlock === "0.0.0.0/0" ||
        r.Properties?.DestinationIpv6CidrBlock === "::/0"),
  );
}

describe("deploy: network", () => {
  test("task subnets have no default route (no 0.0.0.0/0, no ::/0)", () => {
    const tables = routeTablesOf("tasks");
    assert.equal(tables.size, 2);
    assert.deepEqual(defaultRoutes(tables), []);
    assert.deepEqual(defaultRoutes(routeTablesOf("control")), [], "control-plane subnets are isolated too");
    // The check can fail: the gateway's subnets do route to the NAT.
    assert.equal(defaultRoutes(routeTablesOf("egress")).length, 2);
  });

  test("the endpoints tasks need exist (S3 gateway on the task route tables; ECR, logs, secrets, STS, ECS interfaces)", () => {
    const endpoints = Object.values(resources).filter((r) => r.Type === "AWS::EC2::VPCEndpoint");
    const names = endpoints.map((e) => JSON.stringify(e.Properties?.ServiceName));
    for (const svc of [
      "ecr.api",
      "ecr.dkr",
      "logs",
      "secretsmanager",
      "sts",
      "ecs",
      "ecs-agent",
      "ecs-telemetry",
      ".s3",
    ]) {
      assert.ok(
        names.some((n) => n.includes(svc)),
        `endpoint for ${svc}`,
      );
    }
    const s3 = endpoints.find((e) => e.Properties?.VpcEndpointType === "Gateway");
    const s3Tables = new Set(((s3?.Properties?.RouteTableIds ?? []) as unknown[]).map(ref));
    for (const t of routeTablesOf("tasks"))
      assert.ok(s3Tables.has(t), "S3 gateway endpoint routes the task subnets");
    for (const e of endpoints.filter((x) => x.Properties?.VpcEndpointType === "Interface")) {
      assert.equal(e.Properties?.PrivateDnsEnabled, true);
    }
  });

  test("harness tasks' security group allows out only NATS, the gateway and HTTPS", () => {
    const taskSg = Object.entries(resources).find(
      ([, r]) =>
        r.Type === "AWS::EC2::SecurityGroup" &&
        String(r.Properties?.GroupDescription).startsWith("Harness tasks"),
    );
    assert.ok(taskSg, "task security group");
    const inline = (taskSg[1].Properties?.SecurityGroupEgress as Array<Record<string, unknown>>) ?? [];
    const separate = Object.values(resources)
      .filter((r) => r.Type === "AWS::EC2::SecurityGroupEgress")
      .filter((r) => JSON.stringify(r.Properties?.GroupId).includes(taskSg[0]))
      .map((r) => r.Properties ?? {});
    const ports = [...inline, ...separate].map((e) => `${e.IpProtocol}:${e.FromPort}-${e.ToPort}`).sort();
    assert.ok(ports.length > 0);
    for (const p of ports)
      assert.ok(["tcp:443-443", "tcp:4222-4222", "tcp:4000-4000"].includes(p), `unexpected task egress ${p}`);
  });
});
