#!/usr/bin/env bash
# packer validate + fmt for the eval-host AMI, offline. Called by .ci/run.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v packer >/dev/null 2>&1; then
  echo "packer/check.sh: packer is not installed (apt-get install -y packer)" >&2
  exit 127
fi
packer version
packer fmt -check -diff eval-host.pkr.hcl
packer validate eval-host.pkr.hcl
echo "packer/check.sh: eval-host.pkr.hcl is formatted and valid"
