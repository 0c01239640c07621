#!/usr/bin/env bash
# Pre-pull the grader agent and every per-instance image named in the gold-validation manifest, by digest only:
# a tag could point somewhere else tomorrow, a digest is what gold validation checked.
set -euo pipefail

manifest=/tmp/images.json
digest_ref='^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9._/-]+@sha256:[0-9a-f]{64}$'

aws ecr get-login-password --region "$REGION" | docker login --username AWS --password-stdin "$REGISTRY"

refs=$(jq -r '.images[].image' "$manifest")
count=$(printf '%s\n' "$refs" | grep -c . || true)
echo "pre-pulling grader agent and ${count} instance images"

for ref in "$GRADER_AGENT_IMAGE" $refs; do
  if ! [[ "$ref" =~ $digest_ref ]]; then
    echo "refusing ${ref}: images must be pinned by digest (repo@sha256:...)" >&2
    exit 1
  fi
done

docker pull "$GRADER_AGENT_IMAGE"
# Four at a time: the registry and the volume both keep up, and a failure stops the build.
printf '%s\n' $refs | xargs -r -P 4 -n 1 docker pull

# Record what this AMI holds, so the grader can refuse a job whose image the host does not have.
jq '{images: [.images[] | {instance_id, image}]}' "$manifest" > /etc/evalfleet/images.json
docker logout "$REGISTRY"
rm -f /root/.docker/config.json
