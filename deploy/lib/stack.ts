import { Stack, type StackProps } from "aws-cdk-lib";
import type { Construct } from "constructs";
import { CLUSTER_NAME, Compute, EVAL_ASG_NAME } from "./compute.js";
import { readConfig } from "./config.js";
import { Data } from "./data.js";
import { NightlyGuard } from "./guard.js";
import { Images } from "./images.js";
import { NatsCluster } from "./nats.js";
import { Network } from "./network.js";
import { PackerBuildProfile } from "./packer.js";
import { SecurityGroups } from "./security.js";

/** The whole evalfleet deployment in one stack: network, registries, data, NATS, compute, the nightly guard. */
export class EvalfleetStack extends Stack {
  readonly network: Network;
  readonly compute: Compute;
  readonly nats: NatsCluster;

  constructor(scope: Construct, id: string, props?: StackProps) {
    super(scope, id, props);
    const config = readConfig(this.node);
    this.network = new Network(this, "Network");
    const s3PrefixListId = this.node.tryGetContext("s3PrefixListId") as string | undefined;
    const sgs = new SecurityGroups(this, "SecurityGroups", this.network, s3PrefixListId);
    const images = new Images(this, "Images", config.images);
    const data = new Data(this, "Data", { network: this.network, dbSg: sgs.db });
    this.nats = new NatsCluster(this, "Nats", { config, network: this.network, sgs, images, data });
    this.compute = new Compute(this, "Compute", {
      config,
      network: this.network,
      sgs,
      images,
      data,
      natsUrl: this.nats.url,
    });
    new PackerBuildProfile(this, "PackerBuild", images);
    new NightlyGuard(this, "Guard", {
      clusterName: CLUSTER_NAME,
      clusterArn: this.compute.cluster.clusterArn,
      asgName: EVAL_ASG_NAME,
      maxTaskAgeHours: config.guardMaxTaskAgeHours,
    });
  }
}
