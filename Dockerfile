# syntax=docker/dockerfile:1
#
# querygate container image: `docker build -t querygate .`
#
# Build stage: the release binary with the flags CI uses (`cargo build --release --locked`),
# its debug line tables stripped (symbols kept for backtraces): about 35 MB instead of 155 MB.
# Run stage: distroless "cc" (glibc, libgcc, CA certificates; no shell, no package manager),
# numeric non-root user 65532. The root filesystem can be read-only: everything querygate
# writes goes to volumes mounted under /var/lib/querygate (registry, audit) and /tmp;
# configuration and secrets are mounted read-only under /etc/querygate and
# /var/run/secrets/querygate. docs/deployment.md has the layout and a `docker run` example.
# The default command listens on 0.0.0.0, which querygate refuses (exit 2) without `auth`
# unless server.allow_unauthenticated is set: configure auth, or opt out explicitly.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm
ARG DISTROLESS_DEBIAN=debian12

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
# A fixed build date for `server_info` (reproducible builds); 0 means "now".
ARG SOURCE_DATE_EPOCH
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked \
 && install -D -m 0755 target/release/querygate /out/usr/local/bin/querygate \
 && strip --strip-debug /out/usr/local/bin/querygate \
 && install -d -m 0750 /out/var/lib/querygate/registry /out/var/lib/querygate/audit \
    /out/etc/querygate

FROM gcr.io/distroless/cc-${DISTROLESS_DEBIAN}:nonroot
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED
LABEL org.opencontainers.image.title="querygate" \
      org.opencontainers.image.description="SQL over cloud and SaaS APIs for AI agents, served over MCP" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-${DISTROLESS_DEBIAN}:nonroot"
COPY --from=build /out/usr/local/bin/querygate /usr/local/bin/querygate
COPY --from=build --chown=65532:65532 /out/var/lib/querygate /var/lib/querygate
COPY --from=build /out/etc/querygate /etc/querygate
# HOME, XDG_DATA_HOME and XDG_STATE_HOME only set defaults (the registry defaults to
# $XDG_DATA_HOME/querygate/registry = /var/lib/querygate/registry, the audit folder to
# $XDG_STATE_HOME/querygate/audit = /var/lib/querygate/audit); a config file still
# overrides them, unlike QUERYGATE_* variables, which override the file.
ENV HOME=/var/lib/querygate \
    XDG_DATA_HOME=/var/lib \
    XDG_STATE_HOME=/var/lib \
    QUERYGATE_LOG=info
# The audit folder is a volume: writable on a read-only root filesystem (`docker run
# --read-only` gets an anonymous volume unless one is mounted there).
VOLUME ["/var/lib/querygate/audit"]
WORKDIR /var/lib/querygate
USER 65532:65532
EXPOSE 8765
ENTRYPOINT ["/usr/local/bin/querygate"]
CMD ["serve", "--listen", "0.0.0.0:8765"]
