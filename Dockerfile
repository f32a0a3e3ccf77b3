# The operator image: every stage binary, built in release mode, on a distroless base
# with no shell, running as the non-root user 65532 (kube/deployment.yaml picks the stage),
# and /pg-ready, the readiness agent every postgres pod of stages 05 and 06 copies out of it
# (src/failover/agent.rs).
#
#   docker build -t postgres-operator:latest .
#   kind load docker-image postgres-operator:latest    # or push to your registry
#   kubectl apply -k kube/
#
# Expected size: about 61 MB. distroless cc is ~23 MB; each stage binary is a
# stripped, thin-LTO release build with one TLS provider (ring), measured with
# `cargo build --release --locked -p postgres-operator --bins` (2026-11-29, commit 4a0da58):
# stage01 4.9 MB, stage02 5.2, stage03 5.5, stage04 6.5, stage05 6.9, stage06 7.0,
# pg-ready 2.1; 38.1 MB together.

FROM rust:1-bookworm AS build
WORKDIR /src
# The whole crate (.dockerignore leaves out target/ and .git). A real project would
# build the dependencies in a cached layer first; this keeps the recipe obvious.
COPY . .
# Only the operator package (the sandbox is a separate workspace member it never links); only the
# stage binaries and the agent go into the image.
RUN cargo build --release --locked -p postgres-operator --bins \
    && mkdir /out \
    && find target/release -maxdepth 1 -type f -executable \( -name 'stage[0-9]*' -o -name pg-ready \) -exec cp {} /out/ \;

# cc: glibc and libgcc, which Rust binaries link against; :nonroot runs as uid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/ /
USER 65532:65532
# kube/deployment.yaml overrides this with the stage it runs.
ENTRYPOINT ["/stage06"]
