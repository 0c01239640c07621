/**
 * Reading the synthesised CloudFormation template the way CloudFormation would deploy it, for the parts the
 * rehearsal runs: intrinsic functions resolved (Ref, Fn::GetAtt, Fn::Join, Fn::Select, Fn::Split, Fn::Sub,
 * Fn::Base64) with this account/region and made-up physical ids, then the ECS task definitions and services, the
 * eval tier's Auto Scaling group, the NATS instances' user data, the secrets, and the IAM actions each role's
 * policies allow. Nothing here edits what the template says; where a value only AWS can make (an ARN, a subnet id)
 * it is a stable stand-in.
 */
import type { ContainerDef, TaskDef } from "./emulator/ecs.js";
import { ACCOUNT, REGION } from "./emulator/ecs.js";

export interface CfnResource {
  Type: string;
  Properties?: Record<string, unknown>;
}
export interface CfnTemplate {
  Resources: Record<string, CfnResource>;
}

export const secretArn = (logicalId: string) =>
  `arn:aws:secretsmanager:${REGION}:${ACCOUNT}:secret:${logicalId}`;

export class TemplateReader {
  constructor(readonly t: CfnTemplate) {}

  ofType(type: string): Array<[string, CfnResource]> {
    return Object.entries(this.t.Resources).filter(([, r]) => r.Type === type);
  }

  /** A resource's Ref value, as CloudFormation returns it for that type. */
  ref(id: string): string {
    const pseudo: Record<string, string> = {
      "AWS::Region": REGION,
      "AWS::AccountId": ACCOUNT,
      "AWS::URLSuffix": "amazonaws.com",
      "AWS::Partition": "aws",
      "AWS::StackName": "Evalfleet",
      "AWS::StackId": `arn:aws:cloudformation:${REGION}:${ACCOUNT}:stack/Evalfleet/rehearsal`,
      "AWS::NoValue": "",
    };
    if (id in pseudo) return pseudo[id]!;
    const r = this.t.Resources[id];
    if (!r) throw new Error(`template: Ref to unknown ${id}`);
    const p = r.Properties ?? {};
    switch (r.Type) {
      case "AWS::ECR::Repository":
        return String(p.RepositoryName ?? id.toLowerCase());
      case "AWS::SecretsManager::Secret":
        return secretArn(id);
      case "AWS::SecretsManager::SecretTargetAttachment":
        return this.resolve(p.SecretId) as string;
      case "AWS::Logs::LogGroup":
        return String(p.LogGroupName ?? id);
      case "AWS::ECS::Cluster":
        return String(p.ClusterName ?? id);
      case "AWS::IAM::Role":
        return String(p.RoleName ?? id);
      case "AWS::AutoScaling::AutoScalingGroup":
        return String(p.AutoScalingGroupName ?? id);
      case "AWS::EC2::Subnet":
        return `subnet-${id.slice(-8).toLowerCase()}`;
      case "AWS::EC2::SecurityGroup":
        return `sg-${id.slice(-8).toLowerCase()}`;
      case "AWS::EC2::Volume":
        return `vol-${id.slice(-8).toLowerCase()}`;
      default:
        return id;
    }
  }

  getAtt(id: string, attr: string): string {
    const r = this.t.Resources[id];
    if (!r) throw new Error(`template: GetAtt of unknown ${id}`);
    if (attr === "Arn") {
      switch (r.Type) {
        case "AWS::ECR::Repository":
          return `arn:aws:ecr:${REGION}:${ACCOUNT}:repository/${this.ref(id)}`;
        case "AWS::IAM::Role":
          return `arn:aws:iam::${ACCOUNT}:role/${this.ref(id)}`;
        case "AWS::ECS::Cluster":
          return `arn:aws:ecs:${REGION}:${ACCOUNT}:cluster/${this.ref(id)}`;
        case "AWS::Logs::LogGroup":
          return `arn:aws:logs:${REGION}:${ACCOUNT}:log-group:${this.ref(id)}:*`;
        default:
          return `arn:aws:rehearsal:${REGION}:${ACCOUNT}:${id}`;
      }
    }
    if (attr === "PrivateIp") return `10.0.0.${Object.keys(this.t.Resources).indexOf(id) % 250}`;
    if (attr === "GroupId") return this.ref(id);
    return `${id}.${attr}`;
  }

  resolve(v: unknown): unknown {
    if (Array.isArray(v)) return v.map((x) => this.resolve(x));
    if (!v || typeof v !== "object") return v;
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o);
    if (keys.length === 1) {
      const [k] = keys as [string];
      const a = o[k];
      switch (k) {
        case "Ref":
          return this.ref(String(a));
        case "Fn::GetAtt": {
          const [id, attr] = Array.isArray(a) ? (a as string[]) : String(a).split(".");
          return this.getAtt(id!, attr!);
        }
        case "Fn::Join": {
          const [sep, parts] = a as [string, unknown[]];
          return (this.resolve(parts) as unknown[]).map(String).join(sep);
        }
        case "Fn::Select": {
          const [i, list] = a as [number, unknown];
          return (this.resolve(list) as unknown[])[Number(i)];
        }
        case "Fn::Split": {
          const [sep, s] = a as [string, unknown];
          return String(this.resolve(s)).split(sep);
        }
        case "Fn::Base64":
          return this.resolve(a);
        case "Fn::Sub": {
          const [text, vars] = Array.isArray(a) ? (a as [string, Record<string, unknown>]) : [String(a), {}];
          return text.replace(/\$\{([^}]+)\}/g, (_m, name: string) => {
            if (name in vars) return String(this.resolve(vars[name]));
            const [id, attr] = name.split(".");
            return attr ? this.getAtt(id!, attr) : this.ref(id!);
          });
        }
        case "Fn::GetAZs":
          return [`${REGION}a`, `${REGION}b`];
      }
    }
    return Object.fromEntries(keys.map((k) => [k, this.resolve(o[k])]));
  }

  /** Every ECS task definition, resolved, keyed by logical id. */
  taskDefinitions(): Map<string, Omit<TaskDef, "revision" | "arn">> {
    const out = new Map<string, Omit<TaskDef, "revision" | "arn">>();
    for (const [id, r] of this.ofType("AWS::ECS::TaskDefinition")) {
      const p = this.resolve(r.Properties) as Record<string, unknown>;
      const containers = (p.ContainerDefinitions as Array<Record<string, unknown>>).map(
        (c): ContainerDef => ({
          name: String(c.Name),
          image: String(c.Image),
          ...(Array.isArray(c.Command) ? { command: c.Command as string[] } : {}),
          ...(Array.isArray(c.EntryPoint) ? { entryPoint: c.EntryPoint as string[] } : {}),
          environment: Object.fromEntries(
            ((c.Environment ?? []) as Array<{ Name: string; Value: string }>).map((e) => [
              e.Name,
              String(e.Value),
            ]),
          ),
          secrets: Object.fromEntries(
            ((c.Secrets ?? []) as Array<{ Name: string; ValueFrom: string }>).map((e) => [
              e.Name,
              String(e.ValueFrom),
            ]),
          ),
          ...(typeof c.User === "string" ? { user: c.User } : {}),
          essential: c.Essential !== false,
          readonlyRootFilesystem: c.ReadonlyRootFilesystem === true,
          mountPoints: ((c.MountPoints ?? []) as Array<Record<string, unknown>>).map((m) => ({
            containerPath: String(m.ContainerPath),
            sourceVolume: String(m.SourceVolume),
            readOnly: m.ReadOnly === true,
          })),
          dependsOn: ((c.DependsOn ?? []) as Array<Record<string, unknown>>).map((d) => ({
            containerName: String(d.ContainerName),
            condition: String(d.Condition),
          })),
          portMappings: ((c.PortMappings ?? []) as Array<{ ContainerPort: number }>).map(
            (m) => m.ContainerPort,
          ),
          ...(typeof c.WorkingDirectory === "string" ? { workingDirectory: c.WorkingDirectory } : {}),
          ...(typeof c.StopTimeout === "number" ? { stopTimeoutS: c.StopTimeout } : {}),
        }),
      );
      out.set(id, {
        family: String(p.Family),
        networkMode: (String(p.NetworkMode ?? "bridge").toLowerCase() as TaskDef["networkMode"]) ?? "bridge",
        compatibilities: (p.RequiresCompatibilities as string[]) ?? ["EC2"],
        ...(p.Cpu ? { cpu: String(p.Cpu) } : {}),
        ...(p.Memory ? { memory: String(p.Memory) } : {}),
        ...(p.TaskRoleArn ? { taskRole: String(p.TaskRoleArn).split("/").pop()! } : {}),
        containers,
        volumes: ((p.Volumes ?? []) as Array<Record<string, unknown>>).map((v) => ({
          name: String(v.Name),
          ...((v.Host as { SourcePath?: string } | undefined)?.SourcePath
            ? { hostPath: (v.Host as { SourcePath: string }).SourcePath }
            : {}),
        })),
      });
    }
    return out;
  }

  /** ECS services: which task definition (logical id), how many, daemon or not, Cloud Map name. */
  services(): Array<{
    name: string;
    taskDef: string;
    desiredCount: number;
    daemon: boolean;
    launchType: "FARGATE" | "EC2";
    discoveryName?: string;
  }> {
    const discovery = new Map(
      this.ofType("AWS::ServiceDiscovery::Service").map(([id, r]) => [id, String(r.Properties?.Name)]),
    );
    return this.ofType("AWS::ECS::Service").map(([, r]) => {
      const p = r.Properties ?? {};
      const td = (p.TaskDefinition as { Ref: string }).Ref;
      const registry = (
        (p.ServiceRegistries ?? []) as Array<{ RegistryArn?: { "Fn::GetAtt": [string, string] } }>
      )[0];
      const dId = registry?.RegistryArn?.["Fn::GetAtt"]?.[0];
      const daemon = p.SchedulingStrategy === "DAEMON";
      return {
        name: String(p.ServiceName),
        taskDef: td,
        desiredCount: daemon ? 0 : Number(p.DesiredCount ?? 1),
        daemon,
        launchType: p.LaunchType === "EC2" || daemon ? "EC2" : "FARGATE",
        ...(dId && discovery.has(dId) ? { discoveryName: discovery.get(dId)! } : {}),
      };
    });
  }

  /** The Cloud Map namespace services register in (`svc.evalfleet.internal`). */
  namespace(): string {
    const [ns] = this.ofType("AWS::ServiceDiscovery::PrivateDnsNamespace");
    return String(ns?.[1].Properties?.Name ?? "");
  }

  autoScalingGroups(): Array<{
    name: string;
    min: number;
    max: number;
    desired: number;
    launchTemplate: string;
  }> {
    return this.ofType("AWS::AutoScaling::AutoScalingGroup").map(([, r]) => {
      const p = this.resolve(r.Properties) as Record<string, unknown>;
      return {
        name: String(p.AutoScalingGroupName),
        min: Number(p.MinSize ?? 0),
        max: Number(p.MaxSize ?? 0),
        desired: Number(p.DesiredCapacity ?? p.MinSize ?? 0),
        launchTemplate: String(
          (p.LaunchTemplate as { LaunchTemplateName?: string } | undefined)?.LaunchTemplateName ?? "lt",
        ),
      };
    });
  }

  /** EC2 instances (the NATS nodes) and their user data scripts, resolved. */
  instances(): Array<{ id: string; userData: string; dnsNames: string[] }> {
    const records = this.ofType("AWS::Route53::RecordSet").map(
      ([, r]) => this.resolve(r.Properties) as Record<string, unknown>,
    );
    return this.ofType("AWS::EC2::Instance").map(([id, r]) => {
      const userData = String(this.resolve(r.Properties?.UserData) ?? "");
      const ip = this.getAtt(id, "PrivateIp");
      const dnsNames = records
        .filter((rec) => (rec.ResourceRecords as string[] | undefined)?.includes(ip))
        .map((rec) => String(rec.Name).replace(/\.$/, ""));
      return { id, userData, dnsNames };
    });
  }

  /** Secrets Manager secrets: logical id → how the stack generates it (if it does). */
  secrets(): Array<{
    id: string;
    arn: string;
    generate?: { template?: string; key?: string; length?: number };
  }> {
    return this.ofType("AWS::SecretsManager::Secret").map(([id, r]) => {
      const g = r.Properties?.GenerateSecretString as
        | { SecretStringTemplate?: string; GenerateStringKey?: string; PasswordLength?: number }
        | undefined;
      return {
        id,
        arn: secretArn(id),
        ...(g
          ? {
              generate: {
                ...(g.SecretStringTemplate ? { template: g.SecretStringTemplate } : {}),
                ...(g.GenerateStringKey ? { key: g.GenerateStringKey } : {}),
                ...(g.PasswordLength ? { length: g.PasswordLength } : {}),
              },
            }
          : {}),
      };
    });
  }

  /** The IAM actions each role's policies allow (inline policies and AWS::IAM::Policy resources). */
  roleActions(): Map<string, string[]> {
    const out = new Map<string, string[]>();
    const add = (role: string, doc: unknown) => {
      const stmts = ((doc as { Statement?: unknown[] } | undefined)?.Statement ?? []) as Array<{
        Effect?: string;
        Action?: string | string[];
      }>;
      const actions = stmts
        .filter((s) => s.Effect !== "Deny")
        .flatMap((s) => (Array.isArray(s.Action) ? s.Action : s.Action ? [s.Action] : []));
      out.set(role, [...(out.get(role) ?? []), ...actions]);
    };
    for (const [, r] of this.ofType("AWS::IAM::Policy")) {
      for (const role of (r.Properties?.Roles ?? []) as Array<{ Ref: string }>)
        add(this.ref(role.Ref), r.Properties?.PolicyDocument);
    }
    return out;
  }
}

/** `arn[:json-key[:version-stage[:version-id]]]` → the secret's ARN and the JSON key. */
export function parseValueFrom(valueFrom: string): { arn: string; key?: string } {
  const m = /^(arn:aws:secretsmanager:[^:]+:\d+:secret:[^:]+)(?::([^:]*))?(?::[^:]*)?(?::[^:]*)?$/.exec(
    valueFrom,
  );
  if (!m) throw new Error(`not a Secrets Manager valueFrom: ${valueFrom}`);
  return { arn: m[1]!, ...(m[2] ? { key: m[2] } : {}) };
}
