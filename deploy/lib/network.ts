import { RemovalPolicy } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as logs from "aws-cdk-lib/aws-logs";
import { Construct } from "constructs";

/**
 * The VPC. Harness tasks live in `tasks` subnets (PRIVATE_ISOLATED: no route to the internet, no NAT) and reach
 * AWS only through endpoints; they reach NATS and the gateway inside the VPC. Only the gateway, which calls model
 * providers, sits in `egress` subnets behind a NAT. Control-plane hosts (actors, NATS, Aurora, eval hosts) are
 * isolated too. Tasks get /18s: one ENI per Fargate task, sized for 20,000 at once.
 */
/** A literal (not the VPC's token) so security-group rules can be checked at synth time. */
export const VPC_CIDR = "10.0.0.0/16";

export class Network extends Construct {
  readonly vpc: ec2.Vpc;
  readonly endpointSg: ec2.SecurityGroup;

  constructor(scope: Construct, id: string) {
    super(scope, id);
    this.vpc = new ec2.Vpc(this, "Vpc", {
      ipAddresses: ec2.IpAddresses.cidr(VPC_CIDR),
      maxAzs: 2,
      natGateways: 1,
      subnetConfiguration: [
        { name: "public", subnetType: ec2.SubnetType.PUBLIC, cidrMask: 26 },
        { name: "egress", subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 24 },
        { name: "control", subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 22 },
        { name: "tasks", subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 18 },
      ],
      gatewayEndpoints: {
        // ECR image layers live in S3: the gateway endpoint serves every pull without egress.
        S3: { service: ec2.GatewayVpcEndpointAwsService.S3 },
      },
    });
    const flowLogs = new logs.LogGroup(this, "FlowLogs", {
      retention: logs.RetentionDays.THREE_MONTHS,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    this.vpc.addFlowLog("FlowLog", { destination: ec2.FlowLogDestination.toCloudWatchLogs(flowLogs) });

    this.endpointSg = new ec2.SecurityGroup(this, "EndpointSg", {
      vpc: this.vpc,
      description: "Interface endpoints: HTTPS from inside the VPC only",
      allowAllOutbound: false,
    });
    this.endpointSg.addIngressRule(ec2.Peer.ipv4(VPC_CIDR), ec2.Port.tcp(443), "HTTPS from the VPC");

    const services: Record<string, ec2.InterfaceVpcEndpointAwsService> = {
      EcrApi: ec2.InterfaceVpcEndpointAwsService.ECR,
      EcrDkr: ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
      Logs: ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
      Secrets: ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
      Sts: ec2.InterfaceVpcEndpointAwsService.STS,
      Ecs: ec2.InterfaceVpcEndpointAwsService.ECS,
      EcsAgent: ec2.InterfaceVpcEndpointAwsService.ECS_AGENT,
      EcsTelemetry: ec2.InterfaceVpcEndpointAwsService.ECS_TELEMETRY,
      // Eval and NATS hosts are managed through Session Manager: no SSH, no bastion.
      Ssm: ec2.InterfaceVpcEndpointAwsService.SSM,
      SsmMessages: ec2.InterfaceVpcEndpointAwsService.SSM_MESSAGES,
      Ec2Messages: ec2.InterfaceVpcEndpointAwsService.EC2_MESSAGES,
      // The grader-supervisor sets the eval tier's desired capacity from inside the VPC.
      AutoScaling: ec2.InterfaceVpcEndpointAwsService.AUTOSCALING,
    };
    for (const [name, service] of Object.entries(services)) {
      this.vpc.addInterfaceEndpoint(name, {
        service,
        subnets: { subnetGroupName: "control" },
        securityGroups: [this.endpointSg],
        privateDnsEnabled: true,
        open: false,
      });
    }
  }

  get taskSubnets(): ec2.SubnetSelection {
    return { subnetGroupName: "tasks" };
  }
  get controlSubnets(): ec2.SubnetSelection {
    return { subnetGroupName: "control" };
  }
  get egressSubnets(): ec2.SubnetSelection {
    return { subnetGroupName: "egress" };
  }
}
