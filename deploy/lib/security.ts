import * as ec2 from "aws-cdk-lib/aws-ec2";
import { Construct } from "constructs";
import type { Network } from "./network.js";

export const PORTS = { nats: 4222, natsRoute: 6222, natsMonitor: 8222, gateway: 4000, db: 5433 } as const;

/**
 * Security groups, all with explicit egress. A harness task can open exactly three kinds of connection: NATS,
 * the gateway, and AWS endpoints (HTTPS) — nothing else, even inside the VPC.
 */
export class SecurityGroups extends Construct {
  readonly task: ec2.SecurityGroup;
  readonly actor: ec2.SecurityGroup;
  readonly gateway: ec2.SecurityGroup;
  readonly nats: ec2.SecurityGroup;
  readonly db: ec2.SecurityGroup;
  readonly evalHost: ec2.SecurityGroup;

  /**
   * `s3PrefixListId` (the region's com.amazonaws.<region>.s3 managed prefix list) narrows S3 egress exactly.
   * Without it, HTTPS egress is open in the group, which changes nothing for tasks: their route tables have no
   * default route, so 443 leads only to the S3 gateway endpoint and the VPC.
   */
  constructor(scope: Construct, id: string, net: Network, s3PrefixListId?: string) {
    super(scope, id);
    const vpc = net.vpc;
    const sg = (name: string, description: string, allowAllOutbound = false) =>
      new ec2.SecurityGroup(this, name, { vpc, description, allowAllOutbound });
    this.task = sg("Task", "Harness tasks: NATS, gateway and AWS endpoints only");
    this.actor = sg("Actor", "Control-plane actors");
    // The gateway is the one component that calls model providers on the internet.
    this.gateway = sg("Gateway", "Gateway replicas: reach providers through the NAT", true);
    this.nats = sg("Nats", "NATS JetStream cluster");
    this.db = sg("Db", "Aurora PostgreSQL");
    this.evalHost = sg("EvalHost", "Eval hosts (grading)");

    const s3 = s3PrefixListId ? ec2.Peer.prefixList(s3PrefixListId) : ec2.Peer.anyIpv4();
    for (const g of [this.task, this.actor, this.nats, this.evalHost]) {
      g.addEgressRule(net.endpointSg, ec2.Port.tcp(443), "AWS interface endpoints");
      g.addEgressRule(s3, ec2.Port.tcp(443), "S3 gateway endpoint (ECR layers)");
    }
    for (const g of [this.task, this.actor, this.gateway, this.evalHost]) {
      this.nats.addIngressRule(g, ec2.Port.tcp(PORTS.nats), "NATS clients");
      if (g !== this.gateway) g.addEgressRule(this.nats, ec2.Port.tcp(PORTS.nats), "NATS");
    }
    this.nats.addIngressRule(this.nats, ec2.Port.tcp(PORTS.natsRoute), "NATS cluster routes");
    this.nats.addEgressRule(this.nats, ec2.Port.tcp(PORTS.natsRoute), "NATS cluster routes");
    this.nats.addIngressRule(this.actor, ec2.Port.tcp(PORTS.natsMonitor), "NATS monitoring");
    this.actor.addEgressRule(this.nats, ec2.Port.tcp(PORTS.natsMonitor), "NATS monitoring");
    for (const g of [this.task, this.actor]) {
      this.gateway.addIngressRule(g, ec2.Port.tcp(PORTS.gateway), "model calls through the gateway");
      g.addEgressRule(this.gateway, ec2.Port.tcp(PORTS.gateway), "gateway");
    }
    for (const g of [this.actor, this.gateway, this.evalHost]) {
      this.db.addIngressRule(g, ec2.Port.tcp(PORTS.db), "PostgreSQL");
      // The gateway's group allows all egress already (it calls providers on the internet).
      if (g !== this.gateway) g.addEgressRule(this.db, ec2.Port.tcp(PORTS.db), "PostgreSQL");
    }
  }
}
