# The control-plane actors (planner, dispatcher, results-writer, grader-supervisor, judge): one image, the task
# definition's command names the actor (`actor planner`). Runs as the unprivileged user on a read-only root.
ARG RUNTIME_IMAGE
FROM ${RUNTIME_IMAGE}
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/evalfleet"]
CMD ["actor", "--help"]
