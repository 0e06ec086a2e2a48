# outboxd as a container: a Debian 12 build stage, a slim runtime stage with
# only the shared libraries the binary links, run as a non-root user.
#
#   docker build -t outboxd .
#   docker run -v /path/outboxd.yaml:/etc/outboxd/outboxd.yaml:ro \
#       -e ORDERS_DB_PASSWORD=... -p 9180:9180 outboxd
#
# The mounted file must be readable by uid 10001 (outboxd); pass secrets
# with password_env / url_env or password_file on a mounted secret.
# Set relay.listen to 0.0.0.0:9180 for Prometheus outside the container to
# scrape /metrics; the HEALTHCHECK asks /healthz on 127.0.0.1:9180 (set
# OUTBOXD_HEALTH_PORT when listen uses another port). docs/operations.md
# shows it as a compose and a Kubernetes sidecar.
# scripts/docker-check.sh (make check-packaging) keeps the package lists
# below in step with the libraries build/outboxd links and with
# tests/servers.sh; scripts/docker-run-check.sh (make check-docker) builds
# the image and relays events through it against real servers.

FROM debian:12 AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        build-essential pkg-config default-libmysqlclient-dev \
        librabbitmq-dev libyaml-dev libevent-dev libssl-dev libzstd-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile ./
COPY daemon/ daemon/
COPY conf/ conf/
# The version label below must be the one the binary reports.
ARG OUTBOXD_VERSION=0.3.0
RUN grep -q "^#define OUTBOXD_VERSION \"$OUTBOXD_VERSION\"$" daemon/util.h \
    || { echo "OUTBOXD_VERSION=$OUTBOXD_VERSION is not daemon/util.h's" >&2; \
         exit 1; }
# Only the binaries (the man pages need scdoc and no container reads them),
# with Debian's hardening flags, as the package builds them.
RUN eval "$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=sh)" \
    && make -j"$(nproc)" build/outboxd build/outboxctl \
    && install -D -s -m 755 -t /out/usr/local/bin build/outboxd build/outboxctl \
    && install -D -m 644 conf/outboxd.yaml /out/etc/outboxd/outboxd.yaml.example

FROM debian:12-slim
ARG OUTBOXD_VERSION=0.3.0
# Empty until the project has a public home: pass --build-arg.
ARG OUTBOXD_SOURCE=
ARG OUTBOXD_REVISION=
LABEL org.opencontainers.image.title="outboxd" \
      org.opencontainers.image.description="Transactional outbox relay: publishes outbox rows from MySQL/MariaDB to RabbitMQ with publisher confirms" \
      org.opencontainers.image.version="$OUTBOXD_VERSION" \
      org.opencontainers.image.licenses="ISC" \
      org.opencontainers.image.source="$OUTBOXD_SOURCE" \
      org.opencontainers.image.revision="$OUTBOXD_REVISION" \
      org.opencontainers.image.documentation="file:///usr/share/doc/outboxd/README.md"
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        libevent-2.1-7 libevent-pthreads-2.1-7 librabbitmq4 libyaml-0-2 \
        libmariadb3 libzstd1 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin outboxd
COPY --from=build /out/usr/local/bin/ /usr/local/bin/
COPY --from=build /out/etc/outboxd/ /etc/outboxd/
COPY scripts/docker-healthcheck.sh /usr/local/bin/outboxd-healthcheck
# The licence travels with the binaries; the docs are what the label names.
COPY LICENSE README.md NEWS.md /usr/share/doc/outboxd/
COPY docs/*.md /usr/share/doc/outboxd/docs/
USER outboxd:outboxd
EXPOSE 9180
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/outboxd-healthcheck"]
# SIGTERM drains and exits 0 within relay.shutdown_timeout (default 10s,
# the same as docker stop's grace period: raise --stop-timeout with it).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/outboxd", "-c", "/etc/outboxd/outboxd.yaml"]
