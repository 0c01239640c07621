import { ArnFormat, Duration, RemovalPolicy, Stack } from "aws-cdk-lib";
import * as events from "aws-cdk-lib/aws-events";
import * as targets from "aws-cdk-lib/aws-events-targets";
import * as iam from "aws-cdk-lib/aws-iam";
import * as lambda from "aws-cdk-lib/aws-lambda";
import * as logs from "aws-cdk-lib/aws-logs";
import { Construct } from "constructs";
import { ack } from "./nag.js";

/**
 * The nightly guard: whatever a crashed dispatcher or a forgotten run left behind stops costing money by morning.
 * It stops harness tasks older than the age limit (found by their evalfleet:run tag, so services are untouched)
 * and sets the eval tier to zero (the grader-supervisor scales it back if grades are waiting).
 */
export class NightlyGuard extends Construct {
  readonly fn: lambda.Function;

  constructor(
    scope: Construct,
    id: string,
    props: { clusterName: string; clusterArn: string; asgName: string; maxTaskAgeHours: number },
  ) {
    super(scope, id);
    const stack = Stack.of(this);
    const logGroup = new logs.LogGroup(this, "Logs", {
      retention: logs.RetentionDays.THREE_MONTHS,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    const role = new iam.Role(this, "Role", { assumedBy: new iam.ServicePrincipal("lambda.amazonaws.com") });
    const taskArns = stack.formatArn({
      service: "ecs",
      resource: "task",
      resourceName: `${props.clusterName}/*`,
    });
    const policy = new iam.Policy(this, "Policy", {
      statements: [
        new iam.PolicyStatement({
          actions: ["logs:CreateLogStream", "logs:PutLogEvents"],
          resources: [logGroup.logGroupArn, `${logGroup.logGroupArn}:*`],
        }),
        new iam.PolicyStatement({
          actions: ["ecs:ListTasks"],
          resources: [
            stack.formatArn({
              service: "ecs",
              resource: "container-instance",
              resourceName: `${props.clusterName}/*`,
            }),
          ],
          conditions: { ArnEquals: { "ecs:cluster": props.clusterArn } },
        }),
        new iam.PolicyStatement({
          actions: ["ecs:DescribeTasks", "ecs:StopTask"],
          resources: [taskArns],
          conditions: { ArnEquals: { "ecs:cluster": props.clusterArn } },
        }),
        new iam.PolicyStatement({
          actions: ["autoscaling:UpdateAutoScalingGroup"],
          resources: [
            stack.formatArn({
              service: "autoscaling",
              resource: "autoScalingGroup",
              resourceName: `*:autoScalingGroupName/${props.asgName}`,
              arnFormat: ArnFormat.COLON_RESOURCE_NAME,
            }),
          ],
        }),
      ],
    });
    policy.attachToRole(role);
    ack(
      policy,
      `AwsSolutions-IAM5[Resource::<${stack.getLogicalId(logGroup.node.defaultChild as logs.CfnLogGroup)}.Arn>:*]`,
      "Log streams of the guard's own log group only.",
    );
    ack(
      policy,
      `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task/${props.clusterName}/*]`,
      "Task ARNs are unknown in advance; scoped to this cluster.",
    );
    ack(
      policy,
      `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:container-instance/${props.clusterName}/*]`,
      "ListTasks is authorised on container instances; scoped to this cluster.",
    );
    ack(
      policy,
      `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:autoscaling:<AWS::Region>:<AWS::AccountId>:autoScalingGroup:*:autoScalingGroupName/${props.asgName}]`,
      "The group's UUID is assigned at creation; the name pins it.",
    );

    this.fn = new lambda.Function(this, "Fn", {
      runtime: lambda.Runtime.NODEJS_24_X,
      handler: "index.handler",
      code: lambda.Code.fromInline(GUARD_SOURCE),
      timeout: Duration.minutes(10),
      memorySize: 256,
      role,
      logGroup,
      reservedConcurrentExecutions: 1,
    });
    this.fn.node.addDependency(policy);
    new events.Rule(this, "Nightly", {
      description: "evalfleet nightly guard: stop leftover harness tasks, eval tier to zero",
      schedule: events.Schedule.cron({ minute: "0", hour: "4" }),
      // What to guard travels in the event, not the function's environment: the guard has no settings to read.
      targets: [
        new targets.LambdaFunction(this.fn, {
          retryAttempts: 2,
          event: events.RuleTargetInput.fromObject({
            cluster: props.clusterName,
            asgName: props.asgName,
            maxAgeHours: props.maxTaskAgeHours,
          }),
        }),
      ],
    });
  }
}

/** Inline so the guard has no build step; paced well under the RunTask/StopTask bucket (40/s). */
export const GUARD_SOURCE = `
const { ECSClient, ListTasksCommand, DescribeTasksCommand, StopTaskCommand } = require("@aws-sdk/client-ecs");
const { AutoScalingClient, UpdateAutoScalingGroupCommand } = require("@aws-sdk/client-auto-scaling");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
exports.handler = async (event) => {
  const { cluster, asgName, maxAgeHours } = event || {};
  if (!cluster || !asgName || !(Number(maxAgeHours) > 0))
    throw new Error("evalfleet guard: the event must carry cluster, asgName and maxAgeHours (the stack's schedule sends them)");
  const ecs = new ECSClient({});
  const cutoff = Date.now() - Number(maxAgeHours) * 3600 * 1000;
  const arns = [];
  let nextToken;
  do {
    const out = await ecs.send(new ListTasksCommand({ cluster, desiredStatus: "RUNNING", maxResults: 100, nextToken }));
    arns.push(...(out.taskArns || []));
    nextToken = out.nextToken;
  } while (nextToken);
  const stale = [];
  for (let i = 0; i < arns.length; i += 100) {
    const out = await ecs.send(new DescribeTasksCommand({ cluster, tasks: arns.slice(i, i + 100), include: ["TAGS"] }));
    for (const t of out.tasks || []) {
      const isHarness = (t.tags || []).some((x) => x.key === "evalfleet:run");
      if (isHarness && t.createdAt && t.createdAt.getTime() < cutoff) stale.push(t.taskArn);
    }
  }
  let stopped = 0;
  for (const task of stale) {
    try { await ecs.send(new StopTaskCommand({ cluster, task, reason: "evalfleet nightly guard: task older than limit" })); stopped++; }
    catch (e) { console.log(JSON.stringify({ msg: "stop failed", task, error: String(e) })); }
    await sleep(50);
  }
  await new AutoScalingClient({}).send(new UpdateAutoScalingGroupCommand({ AutoScalingGroupName: asgName, MinSize: 0, DesiredCapacity: 0 }));
  const report = { running: arns.length, stale: stale.length, stopped, evalCapacity: 0 };
  console.log(JSON.stringify(report));
  return report;
};
`;
