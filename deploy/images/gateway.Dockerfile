# A gateway replica: the one component holding provider keys. The task definition gives port and keys.
ARG RUNTIME_IMAGE
FROM ${RUNTIME_IMAGE}
USER 10001:10001
EXPOSE 4000
ENTRYPOINT ["/usr/local/bin/evalfleet"]
CMD ["gateway"]
