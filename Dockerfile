# syntax=docker/dockerfile:1
# Muster's container image (docs/deploy.md): a release build in the Rust image, then a
# runtime image with only the binary, CA certificates and a non-root user.
#
#   docker build -t muster .
#   docker run -d --name muster -v muster-data:/var/lib/muster \
#     -p 7070:7070 -p 7053:7053/udp -p 7053:7053 -p 8500:8500 muster
#   docker exec muster muster acl bootstrap --json     # the first operator token, once
#
# It listens on every interface, so authentication is on (deploy/muster.toml): a non-loopback
# bind without `[auth] enabled = true` is refused at start. Mount your own file over
# /etc/muster/muster.toml (or add flags after the image name: they override the file).

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
# The caches keep the registry and the target dir between builds (BuildKit); the binary is
# copied out of the cache mount so the next stage can take it.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p muster \
    && install -m 0755 target/release/muster /usr/local/bin/muster

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/muster --shell /usr/sbin/nologin muster \
    && install -d -o muster -g muster -m 0700 /var/lib/muster
COPY --from=build /usr/local/bin/muster /usr/local/bin/muster
COPY deploy/muster.toml /etc/muster/muster.toml
USER muster:muster
VOLUME ["/var/lib/muster"]
# HTTP API, DNS (UDP and TCP), the Consul-compatible API.
EXPOSE 7070 7053/udp 7053 8500
# /v1/status needs no token, so the check works with authentication on.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s \
    CMD ["muster", "status", "--server", "http://127.0.0.1:7070"]
# SIGTERM stops it gracefully (in-flight requests get `shutdown_grace_ms`, 10 s by default).
STOPSIGNAL SIGTERM
ENTRYPOINT ["muster", "serve", "--config", "/etc/muster/muster.toml"]
