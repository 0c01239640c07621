# The eval worker: one per eval host (an ECS daemon), grading patches in the official per-instance images through
# the host's Docker (its socket is mounted at /var/run/docker.sock). It carries the docker CLI (a static client
# from the build machine) and git/python3 from the base for tasks shipped as repositories. Root, because the
# host's docker socket is root's: whoever holds it is root on the host anyway, and no model-written code runs in
# this container (it runs in the grade containers, --network none, non-root where the image allows).
ARG RUNTIME_IMAGE
FROM ${RUNTIME_IMAGE}
COPY docker /usr/local/bin/docker
RUN /usr/local/bin/docker --version
ENTRYPOINT ["/usr/local/bin/evalfleet"]
CMD ["eval-worker"]
