# nats-server for the three NATS hosts, run with `--network host` and the config the stack writes
# (`docker run … <image> -c /etc/nats/nats.conf`). The binary is the build machine's (Debian's nats-server,
# statically linked Go apart from glibc).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY nats-server /usr/local/bin/nats-server
RUN printf 'nats:x:10002:10002:nats:/nonexistent:/usr/sbin/nologin\n' >> /etc/passwd \
 && printf 'nats:x:10002:\n' >> /etc/group \
 && /usr/local/bin/nats-server --version
EXPOSE 4222 6222 8222
ENTRYPOINT ["/usr/local/bin/nats-server"]
CMD ["--help"]
