import { ArnFormat, Duration, RemovalPolicy, Stack } from "aws-cdk-lib";
import * as autoscaling from "aws-cdk-lib/aws-autoscaling";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as ecs from "aws-cdk-lib/aws-ecs";
import * as iam from "aws-cdk-lib/aws-iam";
import * as logs from "aws-cdk-lib/aws-logs";
import { Construct } from "constructs";
import type { DeployConfig } from "./config.js";
import type { Data } from "./data.js";
import type { Images } from "./images.js";
import { ack } from "./nag.js";
import type { Network } from "./network.js";
import { PORTS, type SecurityGroups } from "./security.js";

export const EVAL_ASG_NAME = "evalfleet-eval-hosts";
export const CLUSTER_NAME = "evalfleet";
export const HARNESS_FAMILY = "evalfleet-harness";
/** The harness task's containers: the dispatcher's overrides and the attempt's exit code are the task container's. */
export const HARNESS_TASK_CONTAINER = "task";
export const HARNESS_CONTAINER = "harness";
/** The gateway's Cloud Map name: harness tasks, the dispatcher and the judge reach it there. */
const GATEWAY_URL = `http://gateway.svc.evalfleet.internal:${PORTS.gateway}`;
const ATTEMPT_VOLUME = "attempt";
const ATTEMPT_MOUNT = "/attempt";
export const ACTORS = ["planner", "dispatcher", "results-writer", "grader-supervisor", "judge"] as const;

/** The eval-host AMI from packer/eval-host.pkr.hcl, by id (one region per deployment, so no lookup). */
function packerAmi(imageId: string): ec2.IMachineImage {
  return {
    getImage: () => ({ imageId, osType: ec2.OperatingSystemType.LINUX, userData: ec2.UserData.forLinux() }),
  };
}

export interface ComputeProps {
  config: DeployConfig;
  network: Network;
  sgs: SecurityGroups;
  images: Images;
  data: Data;
  natsUrl: string;
}

/**
 * The ECS cluster and its two tiers: Fargate for harness tasks (launched one by one by the dispatcher, never a
 * service) and EC2 for eval hosts (grading runs Docker, which Fargate cannot). The actors and the gateway are
 * Fargate services.
 */
export class Compute extends Construct {
  readonly cluster: ecs.Cluster;
  readonly harnessTask: ecs.FargateTaskDefinition;
  readonly evalTask: ecs.Ec2TaskDefinition;
  readonly evalAsg: autoscaling.AutoScalingGroup;
  readonly services: Record<string, ecs.FargateService> = {};

  constructor(
    scope: Construct,
    id: string,
    private readonly props: ComputeProps,
  ) {
    super(scope, id);
    const { network, sgs } = props;
    this.cluster = new ecs.Cluster(this, "Cluster", {
      clusterName: CLUSTER_NAME,
      vpc: network.vpc,
      enableFargateCapacityProviders: true,
      containerInsightsV2: ecs.ContainerInsights.ENABLED,
      defaultCloudMapNamespace: {
        name: "svc.evalfleet.internal",
        vpc: network.vpc,
        useForServiceConnect: false,
      },
    });

    this.harnessTask = this.harness();
    const { asg, task } = this.evalTier();
    this.evalAsg = asg;
    this.evalTask = task;

    for (const actor of ACTORS) this.services[actor] = this.actorService(actor);
    this.services.gateway = this.gatewayService();
    this.grantDispatcher(this.services.dispatcher!.taskDefinition.taskRole);
    this.grantScaler(this.services["grader-supervisor"]!.taskDefinition.taskRole);
    void sgs;
  }

  private logGroup(name: string): logs.LogGroup {
    return new logs.LogGroup(this, `Logs-${name}`, {
      retention: logs.RetentionDays.ONE_MONTH,
      removalPolicy: RemovalPolicy.DESTROY,
    });
  }

  /**
   * The harness task: one attempt per Fargate task, two containers sharing the task's network namespace and one
   * ephemeral volume (`/attempt`), and nothing else:
   *
   * - `task` (essential, uid 10001) runs `evalfleet task`: it gets the job reference as RunTask overrides, holds
   *   the attempt's credentials, prepares the workdir, runs the shim on 127.0.0.1 and hands the harness its command
   *   through the volume; when it exits, ECS stops the whole task.
   * - `harness` (uid 10002, no secrets, no AWS role to speak of) runs `evalfleet harness-runner`: it waits for that
   *   command, runs it in its own process group and reports its exit. Its own root filesystem (the instance image),
   *   its own process namespace: it cannot read the task container's environment or files.
   *
   * The task role has no permissions at all: a task talks to NATS (its per-attempt user) and the gateway only.
   */
  private harness(): ecs.FargateTaskDefinition {
    const td = new ecs.FargateTaskDefinition(this, "HarnessTask", {
      family: HARNESS_FAMILY,
      cpu: 2048,
      memoryLimitMiB: 8192,
      ephemeralStorageGiB: 50,
      runtimePlatform: {
        cpuArchitecture: ecs.CpuArchitecture.X86_64,
        operatingSystemFamily: ecs.OperatingSystemFamily.LINUX,
      },
      volumes: [{ name: ATTEMPT_VOLUME }],
    });
    const image = this.props.images.image("harness", td.obtainExecutionRole());
    const logGroup = this.logGroup("harness");
    const task = td.addContainer(HARNESS_TASK_CONTAINER, {
      containerName: HARNESS_TASK_CONTAINER,
      image,
      command: ["task"],
      user: "10001:10001",
      essential: true,
      logging: ecs.LogDrivers.awsLogs({ streamPrefix: "task", logGroup }),
      environment: {
        NATS_URL: this.props.natsUrl,
        EVALFLEET_GATEWAY_URL: GATEWAY_URL,
        EVALFLEET_HARNESS_RUNNER: ATTEMPT_MOUNT,
        EVALFLEET_WORKDIR: `${ATTEMPT_MOUNT}/work`,
      },
    });
    task.addMountPoints({ containerPath: ATTEMPT_MOUNT, sourceVolume: ATTEMPT_VOLUME, readOnly: false });
    const harness = td.addContainer(HARNESS_CONTAINER, {
      containerName: HARNESS_CONTAINER,
      image,
      command: ["harness-runner", ATTEMPT_MOUNT],
      // Its own user; the evalfleet group lets it write the workdir the task prepared (group-writable) and read
      // the command the task left for it, nothing the task keeps for itself.
      user: "10002:10001",
      // Not essential: its end is the task's to observe (exit code, output), not a reason to kill the task.
      essential: false,
      logging: ecs.LogDrivers.awsLogs({ streamPrefix: "harness", logGroup }),
    });
    harness.addMountPoints({ containerPath: ATTEMPT_MOUNT, sourceVolume: ATTEMPT_VOLUME, readOnly: false });
    // The runner waits on the volume, so it may start first; the task container must exist when it looks.
    harness.addContainerDependencies({ container: task, condition: ecs.ContainerDependencyCondition.START });
    ack(
      td,
      "AwsSolutions-ECS2",
      "Environment carries only endpoints (NATS, gateway) and paths; the job reference arrives as RunTask overrides, credentials never in env.",
    );
    return td;
  }

  private evalTier(): { asg: autoscaling.AutoScalingGroup; task: ecs.Ec2TaskDefinition } {
    const { config, network, sgs } = this.props;
    const role = new iam.Role(this, "EvalHostRole", {
      assumedBy: new iam.ServicePrincipal("ec2.amazonaws.com"),
      managedPolicies: [
        iam.ManagedPolicy.fromAwsManagedPolicyName("service-role/AmazonEC2ContainerServiceforEC2Role"),
        iam.ManagedPolicy.fromAwsManagedPolicyName("AmazonSSMManagedInstanceCore"),
      ],
    });
    ack(
      role,
      "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonEC2ContainerServiceforEC2Role]",
      "The ECS agent's own managed policy: AWS keeps it in step with the agent's API needs.",
    );
    ack(
      role,
      "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]",
      "Session Manager instead of SSH: hosts have no key pairs and no inbound ports.",
    );
    this.props.images.grantPull("instances", role);
    ack(
      role,
      "AwsSolutions-IAM5[Action::ecs:Submit*]",
      "Added by ECS for the container agent to report task and container state; scoped by ECS itself.",
    );

    const userData = ec2.UserData.forLinux();
    const lt = new ec2.LaunchTemplate(this, "EvalHostTemplate", {
      launchTemplateName: "evalfleet-eval-host",
      machineImage: packerAmi(config.evalHostAmiId),
      instanceType: new ec2.InstanceType(config.evalHostInstanceType),
      role,
      securityGroup: sgs.evalHost,
      userData,
      requireImdsv2: true,
      detailedMonitoring: true,
      blockDevices: [
        {
          deviceName: "/dev/xvda",
          volume: ec2.BlockDeviceVolume.ebs(300, {
            encrypted: true,
            volumeType: ec2.EbsDeviceVolumeType.GP3,
            deleteOnTermination: true,
          }),
        },
      ],
    });
    const asg = new autoscaling.AutoScalingGroup(this, "EvalHosts", {
      autoScalingGroupName: EVAL_ASG_NAME,
      vpc: network.vpc,
      vpcSubnets: network.controlSubnets,
      launchTemplate: lt,
      minCapacity: 0,
      maxCapacity: config.evalHostsMax,
      // Desired capacity belongs to the grader-supervisor's scaler; a deploy must not reset it.
      healthChecks: autoscaling.HealthChecks.ec2({ gracePeriod: Duration.minutes(5) }),
    });
    ack(
      asg,
      "AwsSolutions-AS3",
      "Scaling is driven and logged by the grader-supervisor; the nightly guard reports leftovers. No extra notification topic.",
    );

    const cp = new ecs.AsgCapacityProvider(this, "EvalCapacity", {
      capacityProviderName: "evalfleet-eval",
      autoScalingGroup: asg,
      // The scaler owns desired capacity (queue depth → hosts); ECS managed scaling would fight it.
      enableManagedScaling: false,
      enableManagedTerminationProtection: false,
      // ECS drains a host's tasks before the ASG terminates it: no drain-hook Lambda or SNS topic of our own.
      enableManagedDraining: true,
      machineImageType: ecs.MachineImageType.AMAZON_LINUX_2,
    });
    // CDK omits ManagedScaling when disabled; say DISABLED explicitly so no API default can turn it on.
    (cp.node.findChild("EvalCapacity") as ecs.CfnCapacityProvider).addPropertyOverride(
      "AutoScalingGroupProvider.ManagedScaling",
      { Status: "DISABLED" },
    );
    this.cluster.addAsgCapacityProvider(cp);

    // The grader agent: one per host (daemon), driving the host's Docker to run the official per-instance image.
    const task = new ecs.Ec2TaskDefinition(this, "EvalWorkerTask", {
      family: "evalfleet-eval-worker",
      networkMode: ecs.NetworkMode.BRIDGE,
      volumes: [{ name: "docker-sock", host: { sourcePath: "/var/run/docker.sock" } }],
    });
    const c = task.addContainer("eval-worker", {
      containerName: "eval-worker",
      image: this.props.images.image("eval-worker", task.obtainExecutionRole()),
      memoryReservationMiB: 1024,
      essential: true,
      logging: ecs.LogDrivers.awsLogs({
        streamPrefix: "eval-worker",
        logGroup: this.logGroup("eval-worker"),
      }),
      command: ["eval-worker"],
      environment: { NATS_URL: this.props.natsUrl },
      secrets: {
        ...planeUserSecrets(this.props.data),
        // The grade cache and the tasks' validation records live in PostgreSQL.
        ...databaseSecrets(this.props.data),
      },
    });
    c.addMountPoints({ containerPath: "/var/run/docker.sock", sourceVolume: "docker-sock", readOnly: false });
    ack(
      task,
      "AwsSolutions-ECS2",
      "Environment carries only the NATS endpoint and user name; the password comes from Secrets Manager.",
    );
    new ecs.Ec2Service(this, "EvalWorkers", {
      cluster: this.cluster,
      taskDefinition: task,
      daemon: true,
      serviceName: "evalfleet-eval-worker",
      // A daemon replaces its task on each host in place; a failing image must stop the deployment early.
      minHealthyPercent: 0,
      circuitBreaker: { rollback: true },
    });
    return { asg, task };
  }

  private actorService(actor: (typeof ACTORS)[number]): ecs.FargateService {
    const { data, images, network, sgs } = this.props;
    const td = new ecs.FargateTaskDefinition(this, `Task-${actor}`, {
      family: `evalfleet-${actor}`,
      cpu: 1024,
      memoryLimitMiB: 2048,
    });
    td.addContainer(actor, {
      containerName: actor,
      image: images.image("actors", td.obtainExecutionRole()),
      command: ["actor", actor],
      essential: true,
      readonlyRootFilesystem: true,
      logging: ecs.LogDrivers.awsLogs({ streamPrefix: actor, logGroup: this.logGroup(actor) }),
      // Each actor gets what its role reads (config/roles.ts) and nothing else; test/unit/deploy-roles.test.ts
      // holds the template to that.
      environment: {
        NATS_URL: this.props.natsUrl,
        ...actorEnvFor(actor, {
          subnets: network.vpc.selectSubnets(network.taskSubnets).subnetIds,
          securityGroup: sgs.task.securityGroupId,
          evalHostsMax: this.props.config.evalHostsMax,
        }),
      },
      secrets: {
        ...planeUserSecrets(data),
        // The dispatcher alone holds the account's signing key: it mints each attempt's NATS user.
        ...(actor === "dispatcher"
          ? {
              NATS_ACCOUNT: ecs.Secret.fromSecretsManager(data.natsSecrets.signer, "account"),
              NATS_SIGNING_KEY: ecs.Secret.fromSecretsManager(data.natsSecrets.signer, "signingKey"),
            }
          : {}),
        // Every actor shares its state with the others: a deployed role never falls back to an embedded database.
        ...databaseSecrets(data),
      },
    });
    ack(
      td,
      "AwsSolutions-ECS2",
      "Environment carries only endpoints and resource names; passwords come from Secrets Manager.",
    );
    return new ecs.FargateService(this, `Service-${actor}`, {
      cluster: this.cluster,
      serviceName: `evalfleet-${actor}`,
      taskDefinition: td,
      desiredCount: 1,
      // A replacement starts before the old task stops: every actor is safe to run twice for a moment.
      minHealthyPercent: 100,
      maxHealthyPercent: 200,
      vpcSubnets: network.controlSubnets,
      securityGroups: [sgs.actor],
      assignPublicIp: false,
      circuitBreaker: { rollback: true },
    });
  }

  private gatewayService(): ecs.FargateService {
    const { data, images, network, sgs } = this.props;
    const td = new ecs.FargateTaskDefinition(this, "Task-gateway", {
      family: "evalfleet-gateway",
      cpu: 2048,
      memoryLimitMiB: 4096,
    });
    td.addContainer("gateway", {
      containerName: "gateway",
      image: images.image("gateway", td.obtainExecutionRole()),
      command: ["gateway"],
      essential: true,
      readonlyRootFilesystem: true,
      portMappings: [{ containerPort: PORTS.gateway }],
      logging: ecs.LogDrivers.awsLogs({ streamPrefix: "gateway", logGroup: this.logGroup("gateway") }),
      environment: {
        NATS_URL: this.props.natsUrl,
        // Every address of the task: Cloud Map resolves its name to the task's ENI, never to loopback.
        EVALFLEET_GATEWAY_HOST: "0.0.0.0",
        EVALFLEET_GATEWAY_PORT: String(PORTS.gateway),
        ...(this.props.config.providerBaseUrls.anthropic
          ? { ANTHROPIC_BASE_URL: this.props.config.providerBaseUrls.anthropic }
          : {}),
        ...(this.props.config.providerBaseUrls.openai
          ? { OPENAI_BASE_URL: this.props.config.providerBaseUrls.openai }
          : {}),
      },
      secrets: {
        PROVIDER_KEYS: ecs.Secret.fromSecretsManager(data.providerKeys),
        ...planeUserSecrets(data),
        ...databaseSecrets(data),
      },
    });
    ack(
      td,
      "AwsSolutions-ECS2",
      "Environment carries only endpoints and ports; keys and passwords come from Secrets Manager.",
    );
    return new ecs.FargateService(this, "Service-gateway", {
      cluster: this.cluster,
      serviceName: "evalfleet-gateway",
      taskDefinition: td,
      desiredCount: 2,
      minHealthyPercent: 50,
      maxHealthyPercent: 200,
      vpcSubnets: network.egressSubnets,
      securityGroups: [sgs.gateway],
      assignPublicIp: false,
      circuitBreaker: { rollback: true },
      cloudMapOptions: { name: "gateway" },
    });
  }

  /** The dispatcher launches, watches and stops harness tasks in this cluster, and nothing else. */
  private grantDispatcher(role: iam.IRole): void {
    const stack = Stack.of(this);
    const clusterArn = this.cluster.clusterArn;
    const taskArns = stack.formatArn({ service: "ecs", resource: "task", resourceName: "evalfleet/*" });
    const policy = new iam.Policy(this, "DispatcherPolicy", {
      statements: [
        new iam.PolicyStatement({
          actions: ["ecs:RunTask"],
          resources: [
            stack.formatArn({
              service: "ecs",
              resource: "task-definition",
              resourceName: `${HARNESS_FAMILY}*:*`,
            }),
          ],
          conditions: { ArnEquals: { "ecs:cluster": clusterArn } },
        }),
        new iam.PolicyStatement({
          actions: ["ecs:StopTask", "ecs:DescribeTasks"],
          resources: [taskArns],
          conditions: { ArnEquals: { "ecs:cluster": clusterArn } },
        }),
        new iam.PolicyStatement({
          actions: ["ecs:TagResource"],
          resources: [taskArns],
          conditions: { StringEquals: { "ecs:CreateAction": "RunTask" } },
        }),
        new iam.PolicyStatement({
          actions: ["ecs:ListTasks"],
          resources: [
            stack.formatArn({ service: "ecs", resource: "container-instance", resourceName: "evalfleet/*" }),
          ],
          conditions: { ArnEquals: { "ecs:cluster": clusterArn } },
        }),
        new iam.PolicyStatement({
          actions: ["iam:PassRole"],
          resources: [this.harnessTask.taskRole.roleArn, this.harnessTask.obtainExecutionRole().roleArn],
          conditions: { StringEquals: { "iam:PassedToService": "ecs-tasks.amazonaws.com" } },
        }),
      ],
    });
    policy.attachToRole(role);
    ack(
      policy,
      "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task-definition/evalfleet-harness*:*]",
      "Per-instance harness task definitions are registered by the image pipeline under this family prefix.",
    );
    ack(
      policy,
      "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task/evalfleet/*]",
      "Task ARNs are unknown until launch; scoped to this cluster's tasks.",
    );
    ack(
      policy,
      "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:container-instance/evalfleet/*]",
      "ListTasks is authorised on container instances; scoped to this cluster.",
    );
  }

  /** The grader-supervisor reads and sets the eval tier's capacity, and nothing else. */
  private grantScaler(role: iam.IRole): void {
    const stack = Stack.of(this);
    const policy = new iam.Policy(this, "ScalerPolicy", {
      statements: [
        new iam.PolicyStatement({
          actions: ["autoscaling:UpdateAutoScalingGroup", "autoscaling:SetDesiredCapacity"],
          resources: [
            stack.formatArn({
              service: "autoscaling",
              resource: "autoScalingGroup",
              resourceName: `*:autoScalingGroupName/${EVAL_ASG_NAME}`,
              arnFormat: ArnFormat.COLON_RESOURCE_NAME,
            }),
          ],
        }),
        // Describe calls cannot be scoped to a resource in IAM.
        new iam.PolicyStatement({ actions: ["autoscaling:DescribeAutoScalingGroups"], resources: ["*"] }),
      ],
    });
    policy.attachToRole(role);
    ack(
      policy,
      "AwsSolutions-IAM5[Resource::*]",
      "autoscaling:DescribeAutoScalingGroups supports no resource-level permissions.",
    );
    ack(
      policy,
      `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:autoscaling:<AWS::Region>:<AWS::AccountId>:autoScalingGroup:*:autoScalingGroupName/${EVAL_ASG_NAME}]`,
      "The group's UUID is assigned at creation; the name pins it.",
    );
  }
}

/** Where each actor's own settings differ: what its role reads beyond NATS and the database. */
function actorEnvFor(
  actor: (typeof ACTORS)[number],
  o: { subnets: string[]; securityGroup: string; evalHostsMax: number },
): Record<string, string> {
  switch (actor) {
    case "dispatcher":
      return {
        EVALFLEET_BACKEND: "ecs",
        EVALFLEET_ECS_CLUSTER: CLUSTER_NAME,
        EVALFLEET_HARNESS_TASK_FAMILY: HARNESS_FAMILY,
        // The job reference and the attempt's NATS user go to the task container, never the harness container.
        EVALFLEET_HARNESS_CONTAINER: HARNESS_TASK_CONTAINER,
        EVALFLEET_TASK_SUBNETS: o.subnets.join(","),
        EVALFLEET_TASK_SECURITY_GROUPS: o.securityGroup,
        EVALFLEET_GATEWAY_URL: GATEWAY_URL,
      };
    case "grader-supervisor":
      // Fargate has no Docker: this replica scales the eval tier, the eval workers on it grade.
      return {
        EVALFLEET_GRADE_JOBS: "none",
        EVALFLEET_EVAL_ASG: EVAL_ASG_NAME,
        EVALFLEET_EVAL_HOSTS_MAX: String(o.evalHostsMax),
      };
    case "judge":
      return { EVALFLEET_GATEWAY_URL: GATEWAY_URL };
    default:
      return {};
  }
}

/** The Aurora credential's fields as libpq's variables (config/common.ts reads them). */
function databaseSecrets(data: Data): Record<string, ecs.Secret> {
  const secret = data.db.secret!;
  return {
    PGHOST: ecs.Secret.fromSecretsManager(secret, "host"),
    PGPORT: ecs.Secret.fromSecretsManager(secret, "port"),
    PGUSER: ecs.Secret.fromSecretsManager(secret, "username"),
    PGPASSWORD: ecs.Secret.fromSecretsManager(secret, "password"),
    PGDATABASE: ecs.Secret.fromSecretsManager(secret, "dbname"),
  };
}

/** The plane user (deploy/lib/nats-auth.ts) every plane process connects as: its JWT and nkey seed. */
function planeUserSecrets(data: Data): Record<string, ecs.Secret> {
  return {
    NATS_JWT: ecs.Secret.fromSecretsManager(data.natsSecrets.plane, "jwt"),
    NATS_NKEY_SEED: ecs.Secret.fromSecretsManager(data.natsSecrets.plane, "seed"),
  };
}
