import * as iam from "aws-cdk-lib/aws-iam";
import { Construct } from "constructs";
import type { Images } from "./images.js";
import { ack } from "./nag.js";

/** The instance profile packer/eval-host.pkr.hcl names (`iam_instance_profile`); the name is the contract. */
export const PACKER_PROFILE_NAME = "evalfleet-packer-build";

/**
 * What the AMI build instance may do: be reached over Session Manager (packer's `ssh_interface =
 * "session_manager"`: no key pair, no inbound port) and pull the grader agent and the instance images it
 * pre-pulls. Nothing else — it never pushes, and it holds no secret.
 */
export class PackerBuildProfile extends Construct {
  readonly role: iam.Role;
  readonly profile: iam.InstanceProfile;

  constructor(scope: Construct, id: string, images: Images) {
    super(scope, id);
    this.role = new iam.Role(this, "Role", {
      roleName: PACKER_PROFILE_NAME,
      assumedBy: new iam.ServicePrincipal("ec2.amazonaws.com"),
      description: "packer build instance for the evalfleet eval-host AMI",
      managedPolicies: [iam.ManagedPolicy.fromAwsManagedPolicyName("AmazonSSMManagedInstanceCore")],
    });
    ack(
      this.role,
      "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]",
      "packer connects through Session Manager: the build instance has no key pair and no inbound port.",
    );
    images.grantPull("instances", this.role);
    images.grantPull("eval-worker", this.role);
    this.profile = new iam.InstanceProfile(this, "Profile", {
      instanceProfileName: PACKER_PROFILE_NAME,
      role: this.role,
    });
  }
}
