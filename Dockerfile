# The ringlimit node in an empty image: one statically linked binary and
# nothing else (no shell, no libc, no certificates). No base image is pulled,
# so it builds on machines without a registry.
#
# The binary is built on the host and is the whole build context:
#
#   mkdir -p bin/image
#   CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/image/ringlimit-node ./cmd/node
#   docker build -f Dockerfile -t ringlimit bin/image
#
# `make e2e` does the same (tag ringlimit:e2e) before its tests.
#
# Run it with a name and the gossip address the other nodes reach it at:
#
#   docker run --name n1 --network mynet -e RINGLIMIT_GOSSIP_KEY ringlimit \
#     --name n1 --gossip-advertise-addr 10.1.2.11:7946 --seeds 10.1.2.11:7946,10.1.2.12:7946
#
# Inside the container the node listens on every interface (below); which of
# its ports leave the host is decided by `docker run -p` and the networks it
# joins. Publish the gRPC and HTTP ports to clients; keep the peer port
# (7201), the gossip port (7946, TCP and UDP) and /debug/pprof on the nodes'
# own network only (docs/reliability.md). The nodes authenticate each other
# with a shared secret: give every node RINGLIMIT_GOSSIP_KEY (or
# RINGLIMIT_PEER_SECRET), docs/security.md.
FROM scratch
COPY ringlimit-node /ringlimit-node
ENV RINGLIMIT_GRPC_ADDR=0.0.0.0:7101 \
    RINGLIMIT_HTTP_ADDR=0.0.0.0:8101 \
    RINGLIMIT_GOSSIP_ADDR=0.0.0.0:7946 \
    RINGLIMIT_PEER_ADDR=0.0.0.0:7201
EXPOSE 7101/tcp 8101/tcp 7201/tcp 7946/tcp 7946/udp
# nobody: the node needs no privilege (its ports are above 1024).
USER 65534:65534
ENTRYPOINT ["/ringlimit-node"]
