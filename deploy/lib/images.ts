import { RemovalPolicy } from "aws-cdk-lib";
import * as ecr from "aws-cdk-lib/aws-ecr";
import * as ecs from "aws-cdk-lib/aws-ecs";
import type * as iam from "aws-cdk-lib/aws-iam";
import { Construct } from "constructs";
import { IMAGE_NAMES, type ImageName } from "./config.js";
import { ack } from "./nag.js";

/**
 * The private registries. Tags are immutable and every reference the stack makes is by digest, so what a task
 * definition names is exactly what gold validation checked. Per-instance SWE-bench images live in `instances`.
 */
export class Images extends Construct {
  readonly repos: Record<ImageName | "instances", ecr.Repository>;

  constructor(
    scope: Construct,
    id: string,
    private readonly digests: Record<ImageName, string>,
  ) {
    super(scope, id);
    this.repos = Object.fromEntries(
      [...IMAGE_NAMES, "instances" as const].map((name) => [
        name,
        new ecr.Repository(this, `Repo-${name}`, {
          repositoryName: `evalfleet/${name}`,
          imageTagMutability: ecr.TagMutability.IMMUTABLE,
          imageScanOnPush: true,
          removalPolicy: RemovalPolicy.RETAIN,
        }),
      ]),
    ) as Record<ImageName | "instances", ecr.Repository>;
  }

  /** `repo@sha256:…` for a container, with pull rights granted to the execution role that needs them. */
  image(name: ImageName, pullRole: iam.IRole): ecs.ContainerImage {
    this.grantPull(name, pullRole);
    return ecs.ContainerImage.fromRegistry(this.repos[name].repositoryUriForDigest(this.digests[name]));
  }

  /** Pull rights, with the one wildcard they need acknowledged on the role. */
  grantPull(name: ImageName | "instances", role: iam.IRole): void {
    this.repos[name].grantPull(role);
    ack(
      role,
      "AwsSolutions-IAM5[Resource::*]",
      "ecr:GetAuthorizationToken has no resource-level permissions; image pulls are scoped to the repository.",
    );
  }

  uri(name: ImageName): string {
    return this.repos[name].repositoryUriForDigest(this.digests[name]);
  }
}
