import { RemovalPolicy, Size } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as ecs from "aws-cdk-lib/aws-ecs";
import * as iam from "aws-cdk-lib/aws-iam";
import * as route53 from "aws-cdk-lib/aws-route53";
import { Construct } from "constructs";
import type { DeployConfig } from "./config.js";
import type { Data } from "./data.js";
import type { Images } from "./images.js";
import { ack } from "./nag.js";
import { natsServerConfig } from "./nats-auth.js";
import type { Network } from "./network.js";
import { PORTS, type SecurityGroups } from "./security.js";

export const NATS_ZONE = "nats.evalfleet.internal";
const NODES = 3;
// Letters only: it must survive URL-encoding in the route URLs unchanged, so one sed replaces every use.
const ROUTE_PASSWORD_PLACEHOLDER = "ROUTEPASSWORDPLACEHOLDER";

/**
 * A three-node NATS JetStream cluster on EC2. Each node's JetStream store is its own encrypted EBS volume, created
 * apart from the instance and retained, so replacing a node (new AMI, new user data) keeps its data. Nodes find
 * each other through a private hosted zone; nats-server runs from the private registry, pinned by digest.
 */
export class NatsCluster extends Construct {
  readonly url: string;
  readonly instances: ec2.Instance[] = [];

  constructor(
    scope: Construct,
    id: string,
    props: { config: DeployConfig; network: Network; sgs: SecurityGroups; images: Images; data: Data },
  ) {
    super(scope, id);
    const { config, network, sgs, images, data } = props;
    const zone = new route53.PrivateHostedZone(this, "Zone", { zoneName: NATS_ZONE, vpc: network.vpc });
    const hosts = Array.from({ length: NODES }, (_, i) => `nats-${i}.${NATS_ZONE}`);
    this.url = hosts.map((h) => `nats://${h}:${PORTS.nats}`).join(",");

    const role = new iam.Role(this, "Role", {
      assumedBy: new iam.ServicePrincipal("ec2.amazonaws.com"),
      managedPolicies: [iam.ManagedPolicy.fromAwsManagedPolicyName("AmazonSSMManagedInstanceCore")],
    });
    ack(
      role,
      "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]",
      "Session Manager instead of SSH: NATS hosts have no key pairs and no SSH port.",
    );
    // The route password and the servers' auth lines; never the plane user or the signing key.
    data.natsSecrets.route.grantRead(role);
    data.natsSecrets["server-auth"].grantRead(role);
    images.grantPull("nats", role);

    const subnets = network.vpc.selectSubnets(network.controlSubnets).subnets;
    for (let i = 0; i < NODES; i++) {
      const subnet = subnets[i % subnets.length]!;
      const volume = new ec2.Volume(this, `Data${i}`, {
        availabilityZone: subnet.availabilityZone,
        size: Size.gibibytes(config.natsVolumeGiB),
        volumeType: ec2.EbsDeviceVolumeType.GP3,
        encrypted: true,
        removalPolicy: RemovalPolicy.RETAIN,
      });
      const serverConf = natsServerConfig({
        serverName: `nats-${i}`,
        peers: hosts,
        storeDir: "/data/jetstream",
        maxFileStore: Math.floor(config.natsVolumeGiB * 0.8 * 1024 ** 3),
        // Written to /etc/nats/auth.conf by the boot script; included relative to /etc/nats/nats.conf.
        authFile: "auth.conf",
        routePassword: ROUTE_PASSWORD_PLACEHOLDER,
      });
      const userData = ec2.UserData.forLinux();
      userData.addCommands(
        ...bootScript({ volumeId: volume.volumeId, serverConf, image: images.uri("nats"), data }),
      );
      const instance = new ec2.Instance(this, `Node${i}`, {
        vpc: network.vpc,
        vpcSubnets: { subnets: [subnet] },
        instanceType: new ec2.InstanceType(config.natsInstanceType),
        machineImage: ecs.EcsOptimizedImage.amazonLinux2023(),
        securityGroup: sgs.nats,
        role,
        userData,
        requireImdsv2: true,
        detailedMonitoring: true,
        disableApiTermination: true,
        blockDevices: [
          {
            deviceName: "/dev/xvda",
            volume: ec2.BlockDeviceVolume.ebs(30, {
              encrypted: true,
              volumeType: ec2.EbsDeviceVolumeType.GP3,
            }),
          },
        ],
      });
      // CloudFormation attaches the volume; the instance itself needs no EC2 rights.
      new ec2.CfnVolumeAttachment(this, `Attach${i}`, {
        instanceId: instance.instanceId,
        volumeId: volume.volumeId,
        device: "/dev/sdf",
      });
      new route53.ARecord(this, `Dns${i}`, {
        zone,
        recordName: `nats-${i}`,
        target: route53.RecordTarget.fromIpAddresses(instance.instancePrivateIp),
      });
      this.instances.push(instance);
    }
  }
}

/** First-boot script: mount the data volume (formatting it only when blank), write the config, run nats-server. */
function bootScript(o: { volumeId: string; serverConf: string; image: string; data: Data }): string[] {
  const secret = (s: { secretArn: string }) =>
    `$(aws secretsmanager get-secret-value --secret-id ${s.secretArn} --query SecretString --output text)`;
  const registry = o.image.split("/")[0];
  return [
    "set -euo pipefail",
    // Nitro exposes EBS as NVMe; the volume id (without the dash) is the device serial.
    `VOL=${o.volumeId}`,
    // biome-ignore lint/suspicious/noTemplateCurlyInString: bash parameter expansion, not a JS template
    'for i in $(seq 1 60); do DEV=$(lsblk -ndo NAME,SERIAL | awk -v s="${VOL/-/}" \'$2==s{print "/dev/"$1}\'); [ -n "$DEV" ] && break; sleep 5; done',
    'blkid "$DEV" || mkfs.xfs "$DEV"',
    'mkdir -p /data && mount "$DEV" /data && echo "UUID=$(blkid -s UUID -o value $DEV) /data xfs defaults,nofail 0 2" >> /etc/fstab',
    "mkdir -p /data/jetstream /etc/nats && chmod 700 /etc/nats",
    `cat > /etc/nats/nats.conf <<'NATSCONF'\n${o.serverConf}NATSCONF`,
    // Operator mode (deploy/lib/nats-auth.ts): the operator JWT, the system account and both account JWTs.
    `printf '%s\\n' "${secret(o.data.natsSecrets["server-auth"])}" > /etc/nats/auth.conf`,
    `ROUTE_PW=${secret(o.data.natsSecrets.route)}`,
    `sed -i "s|${ROUTE_PASSWORD_PLACEHOLDER}|$ROUTE_PW|g" /etc/nats/nats.conf && chmod 600 /etc/nats/*.conf`,
    `aws ecr get-login-password | docker login --username AWS --password-stdin ${registry}`,
    `docker run -d --name nats --restart always --network host -v /etc/nats:/etc/nats:ro -v /data:/data ${o.image} -c /etc/nats/nats.conf`,
  ];
}
