import { Duration, RemovalPolicy } from "aws-cdk-lib";
import type * as ec2 from "aws-cdk-lib/aws-ec2";
import * as rds from "aws-cdk-lib/aws-rds";
import * as secrets from "aws-cdk-lib/aws-secretsmanager";
import { Construct } from "constructs";
import { ack } from "./nag.js";
import type { Network } from "./network.js";

/**
 * NATS secrets: the cluster's route password (generated), and the operator-mode auth made once by `evalfleet
 * nats-accounts` (deploy/lib/nats-auth.ts): the servers' auth lines, the plane user, the dispatcher's signing key.
 * Harness tasks get a user per attempt, minted by the dispatcher; no role has a password.
 */
/** The database Aurora creates, and the `dbname` of its secret. */
export const DATABASE_NAME = "evalfleet";

export const NATS_SECRET_ROLES = ["route", "server-auth", "plane", "signer"] as const;
export type NatsSecretRole = (typeof NATS_SECRET_ROLES)[number];

/**
 * Durable state and secrets: Aurora PostgreSQL Serverless v2 (the one writer is the results-writer), its generated
 * credentials, the provider keys the gateway holds, and the NATS role passwords. Nothing secret is in the template.
 */
export class Data extends Construct {
  readonly db: rds.DatabaseCluster;
  readonly dbSg: ec2.SecurityGroup;
  readonly providerKeys: secrets.Secret;
  readonly natsSecrets: Record<NatsSecretRole, secrets.Secret>;

  constructor(scope: Construct, id: string, props: { network: Network; dbSg: ec2.SecurityGroup }) {
    super(scope, id);
    this.dbSg = props.dbSg;
    // The secret names the database too (dbname), so every process reads all of libpq's settings from it.
    const credential = new rds.DatabaseSecret(this, "AuroraSecret", {
      username: "evalfleet",
      dbname: DATABASE_NAME,
    });
    ack(
      credential,
      "AwsSolutions-SMG4",
      "The database credential is rotated by the operator runbook between runs; a rotation Lambda would need egress the VPC does not have.",
    );
    this.db = new rds.DatabaseCluster(this, "Aurora", {
      engine: rds.DatabaseClusterEngine.auroraPostgres({ version: rds.AuroraPostgresEngineVersion.VER_16_6 }),
      writer: rds.ClusterInstance.serverlessV2("writer"),
      readers: [rds.ClusterInstance.serverlessV2("reader", { scaleWithWriter: true })],
      serverlessV2MinCapacity: 0.5,
      serverlessV2MaxCapacity: 32,
      vpc: props.network.vpc,
      vpcSubnets: props.network.controlSubnets,
      securityGroups: [props.dbSg],
      credentials: rds.Credentials.fromSecret(credential),
      defaultDatabaseName: DATABASE_NAME,
      port: 5433,
      storageEncrypted: true,
      iamAuthentication: true,
      deletionProtection: true,
      backup: { retention: Duration.days(14) },
      cloudwatchLogsExports: ["postgresql"],
      removalPolicy: RemovalPolicy.SNAPSHOT,
    });

    this.providerKeys = new secrets.Secret(this, "ProviderKeys", {
      description: "Model-provider API keys, read only by the gateway (filled in by the operator)",
    });
    ack(
      this.providerKeys,
      "AwsSolutions-SMG4",
      "Provider keys are issued and rotated at the provider; Secrets Manager cannot rotate them.",
    );

    this.natsSecrets = Object.fromEntries(
      NATS_SECRET_ROLES.map((role) => {
        const s = new secrets.Secret(this, `Nats-${role}`, {
          description:
            role === "route"
              ? "NATS cluster route password"
              : `NATS ${role} (filled in by the operator from \`evalfleet nats-accounts\`)`,
          ...(role === "route"
            ? { generateSecretString: { passwordLength: 40, excludePunctuation: true } }
            : {}),
        });
        ack(
          s,
          "AwsSolutions-SMG4",
          "NATS keys are rotated by re-signing the accounts (evalfleet nats-accounts) and rolling the nodes; a rotation Lambda cannot re-sign them.",
        );
        return [role, s];
      }),
    ) as Record<NatsSecretRole, secrets.Secret>;
  }
}
