# The evalfleet runtime every service image starts from: Node (the build machine's own binary, self-contained
# apart from glibc and libstdc++), the compiled CLI (`npm run build`: JavaScript in dist/, no tsx) and production
# dependencies only (from the lockfile: no CDK, no harness CLIs, no dev tools), plus the task library the images
# agree on. Nothing is pulled: deploy/images/build.ts stages this context from the host and builds it with
# `docker build --network none` over the offline Debian base.
# The base: images/base.ts (Debian bookworm minbase imported offline, plus node, git, patch, python3).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY node /opt/evalfleet/node/bin/node
COPY app /opt/evalfleet/app
COPY library /opt/evalfleet/library
# One non-root user for every process that needs no more (uid/gid fixed so task definitions can name them).
RUN printf 'efsvc:x:10001:10001:evalfleet services:/home/efsvc:/usr/sbin/nologin\n' >> /etc/passwd \
 && printf 'efsvc:x:10001:\n' >> /etc/group \
 && mkdir -p /home/efsvc && chown 10001:10001 /home/efsvc \
 && printf '#!/bin/sh\nexec /opt/evalfleet/node/bin/node --enable-source-maps /opt/evalfleet/app/cli/main.js "$@"\n' \
      > /usr/local/bin/evalfleet \
 && chmod 0755 /usr/local/bin/evalfleet \
 && /usr/local/bin/evalfleet --version
# The task library every image carries at the same path: the planner reads it (a library root), the harness tasks
# and the eval workers find each task's repository there.
ENV NODE_ENV=production \
    EVALFLEET_TASK_LIBRARY_ROOTS=/opt/evalfleet/library
WORKDIR /opt/evalfleet/app
