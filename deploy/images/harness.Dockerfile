# The harness task image: ONE thin layer over the task's own SWE-bench instance image. The repository is already
# in the base (installed the way SWE-bench installs it, history pruned at the base commit), so a task clones
# nothing at run time. This layer adds, under /opt/evalfleet only (nothing in the instance's own environment
# changes): Node, the compiled evalfleet CLI (task entrypoint + shim) with its production dependencies, and the
# harness CLIs at the lockfile's exact versions (they live here and nowhere else).
#
# Built by deploy/images/build.ts, one image per instance, offline (`docker build --network none`):
#   --build-arg BASE_IMAGE=<registry>/evalfleet/instances@sha256:<digest>   (pinned by digest, checked below)
#   --build-arg RUNTIME_IMAGE=<the runtime image build.ts made>
# The context holds the harness CLIs' packages, staged from the host's node_modules by the lockfile.
ARG RUNTIME_IMAGE
ARG BASE_IMAGE
FROM ${RUNTIME_IMAGE} AS runtime

FROM ${BASE_IMAGE}
ARG BASE_IMAGE
# A tag can move under a running fleet; only a digest is what gold validation checked.
RUN case "${BASE_IMAGE}" in *@sha256:????????????????????????????????????????????????????????????????) ;; \
      *) echo "BASE_IMAGE must be pinned by digest (repo@sha256:<64 hex>), got '${BASE_IMAGE}'" >&2; exit 1 ;; esac
COPY --from=runtime /opt/evalfleet /opt/evalfleet
COPY --from=runtime /usr/local/bin/evalfleet /opt/evalfleet/bin/evalfleet
# The harness CLIs join the app's node_modules, where the adapters look for them (node_modules/.bin/claude …).
COPY tools/node_modules /opt/evalfleet/app/node_modules/
ENV PATH=/opt/evalfleet/bin:/opt/evalfleet/node/bin:${PATH} \
    DISABLE_TELEMETRY=1 \
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
    EVALFLEET_TASK_LIBRARY_ROOTS=/opt/evalfleet/library
# The task container runs as eftask (uid 10001), the harness container as efharness (uid 10002): the harness
# cannot read the task's files or signal its processes.
RUN for u in eftask:10001 efharness:10002; do name=${u%:*}; id=${u#*:}; \
      grep -q "^${name}:" /etc/passwd || printf '%s:x:%s:%s:%s:/tmp:/bin/sh\n' "$name" "$id" "$id" "$name" >> /etc/passwd; \
      grep -q "^${name}:" /etc/group || printf '%s:x:%s:\n' "$name" "$id" >> /etc/group; \
    done \
 && mkdir -p /attempt && chown 10001:10001 /attempt && chmod 0770 /attempt \
 && /opt/evalfleet/bin/evalfleet --version \
 && /opt/evalfleet/app/node_modules/.bin/claude --version \
 && /opt/evalfleet/app/node_modules/.bin/codex --version
# The attempt's volume (both containers mount it): Fargate copies this folder's owner and mode into the volume, so
# the task (uid 10001) owns it and the harness (group 10001) may write what the task makes group-writable.
VOLUME ["/attempt"]
# The task gets only a job reference (EVALFLEET_RUN / _CELL / _ATTEMPT / _POOL) and fetches the rest itself.
ENTRYPOINT ["/opt/evalfleet/bin/evalfleet"]
CMD ["task"]
