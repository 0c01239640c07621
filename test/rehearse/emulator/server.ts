/**
 * The AWS wire endpoint of the emulator. The real `@aws-sdk` clients reach it by endpoint override
 * (`AWS_ENDPOINT_URL_ECS`, `AWS_ENDPOINT_URL_AUTO_SCALING`, or `endpoint:` in code) and talk to it exactly as to AWS:
 *
 * - ECS: JSON 1.1 (`POST /`, `X-Amz-Target: AmazonEC2ContainerServiceV20141113.<Operation>`), errors as
 *   `{"__type": "...", "message": "..."}` with HTTP 400;
 * - Auto Scaling: the Query protocol (`Action=…&Version=2011-01-01` form bodies), XML answers and `ErrorResponse`;
 * - both signed with SigV4 (verified in sigv4.ts; an unknown key, a bad signature, a stale date are refused as AWS
 *   refuses them) and authorised per principal against the actions its role's policies allow;
 * - container credentials (`GET /v2/credentials/<id>`): what a task's SDK reads from
 *   `AWS_CONTAINER_CREDENTIALS_FULL_URI`, the rehearsal's stand-in for the task role endpoint ECS serves.
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { AsgModel } from "./asg.js";
import { AwsError, type EcsModel } from "./ecs.js";
import { type Credential, verifySigV4 } from "./sigv4.js";

const ECS_TARGET = "AmazonEC2ContainerServiceV20141113.";
const ASG_XMLNS = "http://autoscaling.amazonaws.com/doc/2011-01-01/";

export interface Principal extends Credential {
  sessionToken?: string;
  /** IAM actions allowed (`ecs:RunTask`, `autoscaling:*`, `*`); everything else is AccessDenied. */
  allow: string[];
  expiresAt?: number;
}

export interface EmulatorCounters {
  requests: number;
  signatureRefused: number;
  accessDenied: number;
  byAction: Record<string, number>;
}

export class AwsEmulator {
  private readonly keys = new Map<string, Principal>();
  /** container-credentials id → access key */
  private readonly taskCredentials = new Map<string, string>();
  readonly counters: EmulatorCounters = { requests: 0, signatureRefused: 0, accessDenied: 0, byAction: {} };
  private readonly servers: Server[] = [];

  constructor(
    readonly ecs: EcsModel,
    readonly asg: AsgModel,
  ) {}

  addPrincipal(p: Principal): void {
    this.keys.set(p.accessKeyId, p);
  }

  /** Credentials a task reads from its container credentials URI (`/v2/credentials/<id>`). */
  issueTaskCredentials(principal: string, allow: string[]): { id: string; principal: Principal } {
    const id = randomUUID();
    const p: Principal = {
      accessKeyId: `ASIA${randomUUID().replace(/-/g, "").slice(0, 16).toUpperCase()}`,
      secretAccessKey: randomUUID() + randomUUID(),
      sessionToken: Buffer.from(randomUUID()).toString("base64"),
      principal,
      allow,
      expiresAt: Date.now() + 6 * 3600_000,
    };
    this.addPrincipal(p);
    this.taskCredentials.set(id, p.accessKeyId);
    return { id, principal: p };
  }

  /** Listen on a TCP port of 127.0.0.1 (0 = any) or a unix socket path. */
  async listen(where: number | string): Promise<string> {
    const server = createServer((req, res) => void this.handle(req, res));
    this.servers.push(server);
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      if (typeof where === "number") server.listen(where, "127.0.0.1", resolve);
      else server.listen(where, resolve);
    });
    if (typeof where === "string") return where;
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    await Promise.all(
      this.servers.map(
        (s) =>
          new Promise<void>((resolve) => {
            s.closeAllConnections();
            s.close(() => resolve());
          }),
      ),
    );
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks);
    this.counters.requests++;
    const url = req.url ?? "/";
    try {
      if (req.method === "GET" && url.startsWith("/v2/credentials/")) return this.credentials(url, res);
      const target = req.headers["x-amz-target"];
      if (typeof target === "string" && target.startsWith(ECS_TARGET))
        return this.ecsCall(target.slice(ECS_TARGET.length), req, body, res);
      const params = Object.fromEntries(new URLSearchParams(body.toString("utf8")));
      if (params.Action) return this.asgCall(params, req, body, res);
      res.writeHead(404).end();
    } catch (err) {
      res.writeHead(500).end(String(err));
    }
  }

  private credentials(url: string, res: ServerResponse): void {
    const key = this.taskCredentials.get(url.slice("/v2/credentials/".length));
    const p = key ? this.keys.get(key) : undefined;
    if (!p) {
      res
        .writeHead(404, { "content-type": "application/json" })
        .end(JSON.stringify({ message: "no such credentials" }));
      return;
    }
    res.writeHead(200, { "content-type": "application/json" }).end(
      JSON.stringify({
        AccessKeyId: p.accessKeyId,
        SecretAccessKey: p.secretAccessKey,
        Token: p.sessionToken,
        Expiration: new Date(p.expiresAt ?? Date.now() + 3600_000).toISOString(),
        RoleArn: `arn:aws:iam::123456789012:role/${p.principal}`,
      }),
    );
  }

  /** Signature, then session token, then the action against the principal's policy. */
  private authorize(service: string, action: string, req: IncomingMessage, body: Buffer): Principal {
    const r = verifySigV4(
      { method: req.method ?? "POST", url: req.url ?? "/", headers: req.headers, body },
      service,
      (id) => this.keys.get(id),
    );
    if (!r.ok) {
      this.counters.signatureRefused++;
      throw new AwsError(r.code, r.message, 403);
    }
    const p = this.keys.get(r.accessKeyId)!;
    if (p.sessionToken !== undefined && req.headers["x-amz-security-token"] !== p.sessionToken) {
      this.counters.signatureRefused++;
      throw new AwsError(
        "UnrecognizedClientException",
        "The security token included in the request is invalid.",
        403,
      );
    }
    if (p.expiresAt !== undefined && Date.now() > p.expiresAt)
      throw new AwsError(
        "ExpiredTokenException",
        "The security token included in the request is expired",
        403,
      );
    const iamAction = `${service}:${action}`;
    const allowed = p.allow.some(
      (a) => a === "*" || a === iamAction || (a.endsWith("*") && iamAction.startsWith(a.slice(0, -1))),
    );
    if (!allowed) {
      this.counters.accessDenied++;
      throw new AwsError(
        service === "ecs" ? "AccessDeniedException" : "AccessDenied",
        `User: arn:aws:sts::123456789012:assumed-role/${p.principal}/session is not authorized to perform: ${iamAction} because no identity-based policy allows the ${iamAction} action`,
      );
    }
    this.counters.byAction[iamAction] = (this.counters.byAction[iamAction] ?? 0) + 1;
    return p;
  }

  private ecsCall(op: string, req: IncomingMessage, body: Buffer, res: ServerResponse): void {
    const send = (status: number, payload: unknown) =>
      res
        .writeHead(status, { "content-type": "application/x-amz-json-1.1", "x-amzn-requestid": randomUUID() })
        .end(JSON.stringify(payload));
    try {
      this.authorize("ecs", op, req, body);
      const input = body.length > 0 ? (JSON.parse(body.toString("utf8")) as Record<string, unknown>) : {};
      const ops: Record<string, (i: Record<string, unknown>) => unknown> = {
        RunTask: (i) => this.ecs.runTask(i),
        StopTask: (i) => this.ecs.stopTask(i),
        DescribeTasks: (i) => this.ecs.describeTasks(i),
        ListTasks: (i) => this.ecs.listTasks(i),
        RegisterTaskDefinition: (i) => this.ecs.registerTaskDefinition(i),
      };
      const fn = ops[op];
      if (!fn) throw new AwsError("UnknownOperationException", `The emulator does not implement ${op}`);
      send(200, fn(input));
    } catch (err) {
      if (err instanceof AwsError) send(err.status, { __type: err.code, message: err.message });
      else send(500, { __type: "ServerException", message: String(err) });
    }
  }

  private asgCall(
    params: Record<string, string>,
    req: IncomingMessage,
    body: Buffer,
    res: ServerResponse,
  ): void {
    const action = params.Action!;
    const requestId = randomUUID();
    const send = (status: number, xmlBody: string) =>
      res.writeHead(status, { "content-type": "text/xml", "x-amzn-requestid": requestId }).end(xmlBody);
    try {
      this.authorize("autoscaling", action, req, body);
      if (params.Version !== "2011-01-01")
        throw new AwsError("InvalidAction", `Version ${params.Version} is not supported`);
      const ops: Record<string, (p: Record<string, string>) => string> = {
        DescribeAutoScalingGroups: (p) => this.asg.describe(p),
        UpdateAutoScalingGroup: (p) => this.asg.update(p),
        SetDesiredCapacity: (p) => this.asg.setDesiredCapacity(p),
      };
      const fn = ops[action];
      if (!fn) throw new AwsError("InvalidAction", `The emulator does not implement ${action}`);
      const result = fn(params);
      send(
        200,
        `<${action}Response xmlns="${ASG_XMLNS}">${result}<ResponseMetadata><RequestId>${requestId}</RequestId></ResponseMetadata></${action}Response>`,
      );
    } catch (err) {
      const e = err instanceof AwsError ? err : new AwsError("InternalFailure", String(err), 500);
      send(
        e.status,
        `<ErrorResponse xmlns="${ASG_XMLNS}"><Error><Type>${e.status >= 500 ? "Receiver" : "Sender"}</Type><Code>${e.code}</Code><Message>${e.message.replace(/[<&]/g, "")}</Message></Error><RequestId>${requestId}</RequestId></ErrorResponse>`,
      );
    }
  }
}
