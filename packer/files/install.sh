#!/usr/bin/env bash
# Host setup for an eval host: Docker on, jq for the manifest, and ECS agent settings that keep pre-pulled images.
set -euo pipefail

dnf install -y jq
systemctl enable --now docker

# The ECS agent would otherwise re-pull images a task names (defeating the pre-pull) and garbage-collect images
# no task has used lately (deleting the per-instance images before their first grade).
mkdir -p /etc/ecs
cat >> /etc/ecs/ecs.config <<'ECSCONF'
ECS_IMAGE_PULL_BEHAVIOR=prefer-cached
ECS_DISABLE_IMAGE_CLEANUP=true
ECS_ENABLE_CONTAINER_METADATA=true
ECSCONF

install -d -m 0755 /etc/evalfleet
install -m 0644 /tmp/evalfleet/grader-agent.env /etc/evalfleet/grader-agent.env
