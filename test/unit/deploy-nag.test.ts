import assert from "node:assert/strict";
import { test } from "node:test";
import { Validations } from "aws-cdk-lib";
import { Annotations, Match } from "aws-cdk-lib/assertions";
import { AwsSolutionsChecks } from "cdk-nag";
import type { IConstruct } from "constructs";
import { buildApp } from "../../deploy/app.js";

test("cdk-nag AwsSolutions passes with every acknowledgment justified in one line; CloudFormation validation passes", () => {
  const { app, stack } = buildApp();
  // cdk-nag v3 is a validation plugin: synthesis throws on any unacknowledged finding (and on CloudFormation
  // validation errors such as dependency cycles).
  assert.doesNotThrow(() => app.synth());

  const report = new AwsSolutionsChecks().validateScope(app);
  const listed = report.violations.map(
    (v) => `${v.ruleName} at ${v.violatingResources.map((r) => r.constructPath).join(", ")}`,
  );
  assert.deepEqual(listed, []);
  Annotations.fromStack(stack).hasNoError("*", Match.stringLikeRegexp("AwsSolutions-"));

  const acks: Array<{ path: string; id: string; reason: string }> = [];
  const walk = (c: IConstruct): void => {
    for (const m of c.node.metadata) {
      if (m.type !== Validations.ACKNOWLEDGED_RULES_METADATA_KEY) continue;
      for (const [id, reason] of Object.entries(m.data as Record<string, string>))
        acks.push({ path: c.node.path, id, reason });
    }
    for (const child of c.node.children) walk(child);
  };
  walk(app);
  // CDK itself acknowledges some CloudFormation-Validate rules; the nag acknowledgments are ours.
  const nagAcks = acks.filter((a) => a.id.includes("AwsSolutions-"));
  assert.ok(nagAcks.length > 0);
  for (const a of nagAcks) {
    assert.ok(
      a.reason.length >= 20 && !a.reason.includes("\n"),
      `one-line justification for ${a.id} at ${a.path}`,
    );
  }
});
