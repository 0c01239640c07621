import { Validations } from "aws-cdk-lib";
import type { IConstruct } from "constructs";

/**
 * Acknowledge a cdk-nag finding on a construct (and its children), with the one-line reason it is acceptable.
 * cdk-nag v3 matches findings exactly: IAM5 findings carry their subject, e.g. `AwsSolutions-IAM5[Resource::*]`.
 */
export function ack(scope: IConstruct, id: string, reason: string): void {
  Validations.of(scope).acknowledge({ id, reason });
}
