import type { Node } from "constructs";

/**
 * Deployment inputs, read from CDK context (`cdk synth -c evalHostAmiId=ami-… -c images='{"harness":"sha256:…"}'`).
 * Every image is referenced by digest: a tag can move under a running fleet, a digest cannot.
 */
export interface DeployConfig {
  /** The eval-host AMI built by packer/eval-host.pkr.hcl. */
  evalHostAmiId: string;
  /** Digests of the images in the stack's ECR repositories. */
  images: Record<ImageName, string>;
  evalHostInstanceType: string;
  evalHostsMax: number;
  natsInstanceType: string;
  natsVolumeGiB: number;
  /** Hours a harness task may live before the nightly guard stops it. */
  guardMaxTaskAgeHours: number;
  /**
   * Where the gateway sends each provider's calls, when not to the provider's own API (a proxy, a compatible
   * server; the rehearsal's scripted provider). Absent: the providers' public endpoints.
   */
  providerBaseUrls: Partial<Record<"anthropic" | "openai", string>>;
}

export const IMAGE_NAMES = ["harness", "actors", "gateway", "eval-worker", "nats"] as const;
export type ImageName = (typeof IMAGE_NAMES)[number];

const DIGEST = /^sha256:[0-9a-f]{64}$/;
/** A well-formed digest that pulls nothing: synthesis and tests without a real image pipeline. */
export const PLACEHOLDER_DIGEST = `sha256:${"0".repeat(64)}`;

export function readConfig(node: Node): DeployConfig {
  const ctx = (k: string): unknown => node.tryGetContext(k);
  const images = Object.fromEntries(IMAGE_NAMES.map((n) => [n, PLACEHOLDER_DIGEST])) as Record<
    ImageName,
    string
  >;
  const given = ctx("images");
  const parsed = typeof given === "string" ? (JSON.parse(given) as unknown) : given;
  if (parsed && typeof parsed === "object") Object.assign(images, parsed);
  for (const [name, digest] of Object.entries(images)) {
    if (!DIGEST.test(digest))
      throw new Error(`context images.${name} must be a sha256 digest, got ${JSON.stringify(digest)}`);
  }
  const ami = String(ctx("evalHostAmiId") ?? "ami-00000000000000000");
  if (!/^ami-[0-9a-f]{8,17}$/.test(ami))
    throw new Error(`context evalHostAmiId must be an AMI id, got ${ami}`);
  const num = (k: string, d: number): number => {
    const v = ctx(k);
    return v === undefined ? d : Number(v);
  };
  const urls = ctx("providerBaseUrls");
  const providerBaseUrls = (typeof urls === "string" ? JSON.parse(urls) : (urls ?? {})) as Record<
    string,
    unknown
  >;
  for (const [k, v] of Object.entries(providerBaseUrls)) {
    if ((k !== "anthropic" && k !== "openai") || typeof v !== "string" || !/^https?:\/\/[^\s]+$/.test(v))
      throw new Error(
        `context providerBaseUrls.${k} must be an http(s) URL for "anthropic" or "openai", got ${JSON.stringify(v)}`,
      );
  }
  return {
    providerBaseUrls: providerBaseUrls as DeployConfig["providerBaseUrls"],
    evalHostAmiId: ami,
    images,
    evalHostInstanceType: String(ctx("evalHostInstanceType") ?? "m7i.4xlarge"),
    evalHostsMax: num("evalHostsMax", 100),
    natsInstanceType: String(ctx("natsInstanceType") ?? "m7i.xlarge"),
    natsVolumeGiB: num("natsVolumeGiB", 500),
    guardMaxTaskAgeHours: num("guardMaxTaskAgeHours", 12),
  };
}

/**
 * Feature flags the app sets. The launch-template flag matters most: new accounts cannot create launch
 * configurations, so every Auto Scaling group must be built from a launch template.
 */
export const FEATURE_FLAGS: Record<string, unknown> = {
  "@aws-cdk/aws-autoscaling:generateLaunchTemplateInsteadOfLaunchConfig": true,
  "@aws-cdk/aws-ec2:restrictDefaultSecurityGroup": true,
  "@aws-cdk/aws-ecs:arnFormatIncludesClusterName": true,
  "@aws-cdk/aws-iam:minimizePolicies": true,
  "@aws-cdk/aws-ecs:disableExplicitDeploymentControllerForCircuitBreaker": true,
  "@aws-cdk/aws-rds:databaseProxyUniqueResourceName": true,
  "@aws-cdk/aws-ec2:launchTemplateDefaultUserData": true,
  "@aws-cdk/aws-ecs:removeDefaultDeploymentAlarm": true,
  "@aws-cdk/aws-lambda:recognizeLayerVersion": true,
  "@aws-cdk/core:enablePartitionLiterals": true,
};
