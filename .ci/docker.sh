# Sourced by .ci/run: a Docker daemon, a registry and a Debian base rootfs for the container tests.
# Exports DOCKER_HOST, EVALFLEET_TEST_REGISTRY and EVALFLEET_BASE_ROOTFS (see test/helpers/docker.ts), and stops
# what it started when .ci/run exits. State lives in one folder so a later CI run on the same machine reuses the
# daemon's image cache and the debootstrapped rootfs instead of building them again.
EF_CI_DOCKER="${EF_CI_DOCKER:-/tmp/evalfleet-ci-docker}"
EF_CI_STARTED=()

ef_docker_install() {
  local missing=()
  command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || missing+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
  command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing ${missing[*]}"
    apt_install "${missing[@]}"
  fi
  # Debian starts the packaged registry on :5000 with its own config; ours runs on a free port beside it.
}

ef_http_ok() {
  node -e 'fetch(process.argv[1]).then((r)=>process.exit(r.ok?0:1),()=>process.exit(1))' "$1"
}

ef_docker_start() {
  mkdir -p "$EF_CI_DOCKER"
  local sock="$EF_CI_DOCKER/docker.sock"
  export DOCKER_HOST="unix://$sock"
  if ! docker version >/dev/null 2>&1; then
    rm -f "$sock"
    dockerd --bridge=none --iptables=false --ip6tables=false \
      --data-root "$EF_CI_DOCKER/data" --exec-root "$EF_CI_DOCKER/exec" \
      -H "$DOCKER_HOST" --pidfile "$EF_CI_DOCKER/dockerd.pid" >"$EF_CI_DOCKER/dockerd.log" 2>&1 &
    EF_CI_STARTED+=($!)
    for _ in $(seq 1 120); do docker version >/dev/null 2>&1 && break; sleep 0.5; done
    docker version >/dev/null 2>&1 || { echo "dockerd did not start:" >&2; tail -20 "$EF_CI_DOCKER/dockerd.log" >&2; return 1; }
  fi
  echo "DOCKER_HOST=$DOCKER_HOST ($(docker version --format '{{.Server.Version}}'))"

  local port
  port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  cat >"$EF_CI_DOCKER/registry.yml" <<YAML
version: 0.1
storage:
  filesystem:
    rootdirectory: $EF_CI_DOCKER/registry
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
YAML
  docker-registry serve "$EF_CI_DOCKER/registry.yml" >"$EF_CI_DOCKER/registry.log" 2>&1 &
  EF_CI_STARTED+=($!)
  export EVALFLEET_TEST_REGISTRY="127.0.0.1:$port"
  for _ in $(seq 1 60); do ef_http_ok "http://$EVALFLEET_TEST_REGISTRY/v2/" && break; sleep 0.5; done
  ef_http_ok "http://$EVALFLEET_TEST_REGISTRY/v2/" || { echo "docker-registry did not start:" >&2; cat "$EF_CI_DOCKER/registry.log" >&2; return 1; }
  echo "EVALFLEET_TEST_REGISTRY=$EVALFLEET_TEST_REGISTRY"

  # The base rootfs: debootstrapped once (≈ 60 s), reused by every test file and later CI runs.
  export EVALFLEET_BASE_ROOTFS="$EF_CI_DOCKER/rootfs"
  if [ ! -f "$EF_CI_DOCKER/rootfs.done" ]; then
    rm -rf "$EVALFLEET_BASE_ROOTFS"
    echo "debootstrapping the base rootfs"
    debootstrap --variant=minbase --include=git,patch,python3,python3-pytest,ca-certificates \
      bookworm "$EVALFLEET_BASE_ROOTFS" http://deb.debian.org/debian >"$EF_CI_DOCKER/debootstrap.log" 2>&1 ||
      { echo "debootstrap failed:" >&2; tail -30 "$EF_CI_DOCKER/debootstrap.log" >&2; return 1; }
    date -u +%FT%TZ >"$EF_CI_DOCKER/rootfs.done"
  fi
  echo "EVALFLEET_BASE_ROOTFS=$EVALFLEET_BASE_ROOTFS"
}

ef_docker_stop() {
  local pid
  for pid in "${EF_CI_STARTED[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${EF_CI_STARTED[@]}"; do wait "$pid" 2>/dev/null || true; done
}
