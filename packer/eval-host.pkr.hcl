# The eval-host AMI: Docker and the ECS agent (from the ECS-optimized Amazon Linux 2023 base), the grader agent
# image, and every per-instance SWE-bench image of the run's task set pre-pulled by digest, so a host grades its
# first patch without pulling ~1 GB over the wire. Built from the manifest gold validation writes.
#
# No `required_plugins` block: Debian's packer 1.6.6 (what CI has) rejects it. With packer >= 1.7 run
# `packer init` with plugins.pkr.hcl.example copied to plugins.pkr.hcl (see that file).

variable "region" {
  type    = string
  default = "us-east-1"
}

variable "instance_type" {
  type    = string
  default = "m7i.2xlarge"
}

variable "image_manifest" {
  type        = string
  description = "JSON manifest from gold validation: {\"images\": [{\"instance_id\": \"...\", \"image\": \"<repo>@sha256:<digest>\"}]}"
  default     = "images.example.json"
}

variable "grader_agent_image" {
  type        = string
  description = "The eval-worker (grader agent) image, by digest."
  default     = "123456789012.dkr.ecr.us-east-1.amazonaws.com/evalfleet/eval-worker@sha256:0000000000000000000000000000000000000000000000000000000000000000"
}

variable "registry" {
  type        = string
  description = "The private ECR registry the images are pulled from (account.dkr.ecr.region.amazonaws.com)."
  default     = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
}

variable "kms_key_id" {
  type        = string
  description = "KMS key for the AMI's encrypted snapshots; empty uses the account's default EBS key."
  default     = ""
}

variable "volume_size_gb" {
  type        = number
  description = "Root volume size: the pre-pulled images (about 1.1 GB each) live on it."
  default     = 300
}

variable "subnet_id" {
  type        = string
  description = "Build subnet: needs a route to ECR (endpoints or NAT)."
  default     = ""
}

variable "build_id" {
  type    = string
  default = "dev"
}

locals {
  ami_name = "evalfleet-eval-host-${var.build_id}-${formatdate("YYYYMMDDhhmmss", timestamp())}"
  tags = {
    Project     = "evalfleet"
    Role        = "eval-host"
    BuildId     = var.build_id
    ImageSet    = basename(var.image_manifest)
    GraderAgent = var.grader_agent_image
    ManagedBy   = "packer"
  }
}

source "amazon-ebs" "eval_host" {
  region               = var.region
  instance_type        = var.instance_type
  subnet_id            = var.subnet_id
  ssh_username         = "ec2-user"
  ssh_interface        = "session_manager"
  iam_instance_profile = "evalfleet-packer-build"
  ami_name             = local.ami_name
  ami_description      = "evalfleet eval host: docker, grader agent, per-instance images pre-pulled by digest"

  source_ami_filter {
    filters = {
      name                = "al2023-ami-ecs-hvm-*-x86_64"
      virtualization-type = "hvm"
      root-device-type    = "ebs"
    }
    owners      = ["amazon"]
    most_recent = true
  }

  # Everything at rest is encrypted: the build volume, and the AMI's snapshots.
  encrypt_boot = true
  kms_key_id   = var.kms_key_id

  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_size           = var.volume_size_gb
    volume_type           = "gp3"
    throughput            = 500
    iops                  = 6000
    encrypted             = true
    delete_on_termination = true
  }

  # IMDSv2 on the hosts built from this AMI is enforced by the launch template (deploy/lib/compute.ts);
  # packer 1.6.6 has no metadata_options for the build instance.

  tags            = local.tags
  snapshot_tags   = local.tags
  run_tags        = merge(local.tags, { Name = "packer-${local.ami_name}" })
  run_volume_tags = local.tags
}

build {
  sources = ["source.amazon-ebs.eval_host"]

  provisioner "file" {
    source      = var.image_manifest
    destination = "/tmp/images.json"
  }

  provisioner "file" {
    source      = "${path.root}/files/"
    destination = "/tmp/evalfleet"
  }

  provisioner "shell" {
    environment_vars = [
      "REGISTRY=${var.registry}",
      "REGION=${var.region}",
      "GRADER_AGENT_IMAGE=${var.grader_agent_image}",
    ]
    execute_command = "sudo -E bash '{{ .Path }}'"
    scripts = [
      "${path.root}/files/install.sh",
      "${path.root}/files/prepull.sh",
    ]
  }
}
