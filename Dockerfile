# syntax=docker/dockerfile:1.4
# kvserve images, built from Debian trixie's own packages (LibTorch 2.6, CUDA 12.4, gRPC 1.51).
#
#   docker build --target test .                     the test suite under LibTorch 2.6 (CPU)
#   docker build --target runtime-cpu  -t kvserve:cpu .
#   docker build --target runtime-cuda -t kvserve:cuda .
#   docker run --rm -p 50051:50051 -p 8000:8000 -p 9400:9400 kvserve:cpu   serves the embedded model
#
# scripts/container.sh wraps these (and builds with buildah where no Docker daemon runs).
#
# Build arguments:
#   CUDNN=download (default) | stub
#     Debian's nvidia-cudnn is an installer that downloads cuDNN from NVIDIA while the package
#     is configured, so it needs internet. CUDNN=stub is FOR OFFLINE VERIFICATION ONLY: it
#     replaces cuDNN with a stand-in package holding a link-only stub libcudnn.so.9 (every
#     symbol LibTorch imports, each one an empty function), which lets the CUDA variant
#     compile, link and start, but any cuDNN call (convolutions; kvserve makes none) would do
#     nothing. Never ship an image built with CUDNN=stub to a GPU node.
#   BUILD_JOBS     parallel compile jobs (default: all cores)
#   DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR   where apt fetches from (scripts/container.sh passes
#                                           the build machine's; an empty security mirror: none)
#   VCS_REF, BUILD_DATE                     recorded in the OCI labels
#
# Stages: os -> build-deps -> builder-cpu -> test | runtime-cpu
#                          -> builder-cuda -> runtime-cuda
# Runtime stages install exactly the packages that own the libraries the binaries load (worked
# out with ldd in the builder), so build-only packages never reach them.

ARG DEBIAN_IMAGE=debian:trixie

# --- os: trixie with contrib and non-free (libtorch-cuda, the CUDA toolkit, cuDNN) ------------
FROM ${DEBIAN_IMAGE} AS os
ARG DEBIAN_MIRROR=http://deb.debian.org/debian
ARG DEBIAN_SECURITY_MIRROR=http://deb.debian.org/debian-security
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
# An empty DEBIAN_SECURITY_MIRROR (a mirror without one) leaves the security source out.
RUN rm -f /etc/apt/sources.list /etc/apt/sources.list.d/* \
 && printf '%s\n' "Types: deb" "URIs: ${DEBIAN_MIRROR}" "Suites: trixie trixie-updates" \
      "Components: main contrib non-free non-free-firmware" \
      "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
      > /etc/apt/sources.list.d/debian.sources \
 && if [ -n "${DEBIAN_SECURITY_MIRROR}" ]; then \
      printf '%s\n' "" "Types: deb" "URIs: ${DEBIAN_SECURITY_MIRROR}" "Suites: trixie-security" \
        "Components: main contrib non-free non-free-firmware" \
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
        >> /etc/apt/sources.list.d/debian.sources; \
    fi \
 && printf '%s\n' 'APT::Install-Recommends "false";' 'APT::Install-Suggests "false";' \
      > /etc/apt/apt.conf.d/90kvserve

# --- build-deps: compilers and every library except LibTorch ---------------------------------
FROM os AS build-deps
RUN apt-get update \
 && apt-get install -y build-essential cmake ninja-build ccache pkg-config git file \
      libopenblas0-pthread libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev \
      protobuf-compiler libspdlog-dev libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev \
      nlohmann-json3-dev libre2-dev prometheus-cpp-dev libonig-dev libutf8proc-dev \
      libyaml-cpp-dev libcpp-httplib-dev python3-grpcio python3-protobuf python3-numpy \
      libdnnl-dev \
 && rm -rf /var/lib/apt/lists/*
# Lists the packages owning the shared libraries that the given binaries load (one per line):
# what a runtime stage must install. Libraries no package owns (the host's CUDA driver) are
# left out.
RUN printf '%s\n' '#!/bin/sh' 'set -eu' \
      'ldd "$@" | awk '"'"'$2 == "=>" && $3 ~ /^\// {print $3}'"'"' | sort -u |' \
      'while read -r lib; do' \
      '  real="$(realpath "$lib")"' \
      '  dpkg -S "$real" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || dpkg -S "/usr$lib" 2>/dev/null || true' \
      'done | cut -d: -f1 | sort -u' \
      > /usr/local/bin/runtime-packages \
 && chmod +x /usr/local/bin/runtime-packages

# --- builder-cpu: LibTorch 2.6 (CPU), the whole tree in Release --------------------------------
FROM build-deps AS builder-cpu
ARG BUILD_JOBS=
RUN apt-get update && apt-get install -y libtorch-dev && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN --mount=type=cache,id=kvserve-ccache,target=/root/.cache/ccache \
    cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
 && cmake --build /build -j "${BUILD_JOBS:-$(nproc)}" \
 && (ccache --show-stats | grep -Ei 'hits|misses' || true)
RUN mkdir -p /opt/kvserve/bin \
 && cp /build/server/kvserve /build/client/kvctl /build/model/kvserve-generate /opt/kvserve/bin/ \
 && strip --strip-unneeded /opt/kvserve/bin/* \
 && runtime-packages /opt/kvserve/bin/* > /opt/kvserve/runtime-packages.txt \
 && cat /opt/kvserve/runtime-packages.txt

# --- test: the whole suite on LibTorch 2.6 ------------------------------------------------------
FROM builder-cpu AS test
# What the suite needs beyond the build: Node.js for the tokenizer reference comparison, nginx
# for the gateway test, kubectl and PyYAML for the manifest test.
RUN apt-get update && apt-get install -y nodejs npm nginx python3-yaml kubectl \
 && rm -rf /var/lib/apt/lists/*
# The reference npm packages come from the npm registry; offline, that one test skips itself.
# Behind a TLS-inspecting proxy, pass its CA bundle as the build secret ca_bundle
# (scripts/container.sh passes the host's /etc/ssl/certs/ca-certificates.crt); it is not kept
# in the image.
RUN --mount=type=secret,id=ca_bundle \
    cd /src/tests/tokenizer_reference \
 && if [ -s /run/secrets/ca_bundle ]; then export NPM_CONFIG_CAFILE=/run/secrets/ca_bundle; fi \
 && (timeout 600 npm ci --no-audit --no-fund --loglevel=error \
     || echo "test: npm registry unreachable; tokenizer_reference will be skipped")
# Every test but the format check: that one is pinned to Debian 12's clang-format 14 (`make
# test` runs it), and trixie's clang-format 19 lays some constructs out differently.
RUN cd /build && ctest --output-on-failure -j 1 -E '^format_check$' \
 && echo "test: the suite passed on LibTorch $(dpkg-query -W -f '${Version}' libtorch2.6)"

# --- builder-cuda: LibTorch 2.6 with CUDA 12.4 -------------------------------------------------
FROM build-deps AS builder-cuda
ARG BUILD_JOBS=
ARG CUDNN=download
# Stand-in packages, built with equivs:
#  - kvserve-host-cuda-driver provides libcuda.so.1: in a container the driver library comes
#    from the host (the NVIDIA Container Toolkit mounts it), so the image must not ship one.
#  - with CUDNN=stub (offline verification only, see the top of this file), kvserve-cudnn-stub
#    provides nvidia-cudnn and holds a link-only libcudnn.so.9 made from the symbols
#    libtorch_cuda imports, under cuDNN's symbol version (libcudnn.so.9) as they are imported.
RUN apt-get update && apt-get install -y equivs \
 && mkdir -p /opt/kvserve/debs /tmp/standin && cd /tmp/standin \
 && printf '%s\n' 'Section: misc' 'Priority: optional' 'Standards-Version: 4.7.0' \
      'Package: kvserve-host-cuda-driver' 'Version: 1.0' 'Provides: libcuda.so.1 (= 999)' \
      'Architecture: all' 'Description: the CUDA driver comes from the host' \
      ' In containers the NVIDIA Container Toolkit mounts the host driver libcuda.so.1.' \
      > driver.ctl \
 && equivs-build driver.ctl >/dev/null && mv kvserve-host-cuda-driver_*.deb /opt/kvserve/debs/ \
 && if [ "$CUDNN" = stub ]; then \
      echo "builder-cuda: CUDNN=stub: link-only cuDNN stand-in, FOR OFFLINE VERIFICATION ONLY" \
      && apt-get download libtorch-cuda-2.6 && dpkg-deb -x libtorch-cuda-2.6_*.deb x \
      && nm -D --undefined-only x/usr/lib/*/libtorch*.so.2.6.0 \
         | awk '$2 ~ /^cudnn/ {sub(/@.*/, "", $2); print $2}' | sort -u > symbols \
      && test -s symbols \
      && awk '{print "void " $1 "(void) {}"}' symbols > stub.c \
      && echo 'libcudnn.so.9 { global: *; };' > version.map \
      && gcc -shared -fPIC -Wl,-soname,libcudnn.so.9 -Wl,--version-script=version.map \
           -o libcudnn.so.9 stub.c \
      && printf '%s\n' 'Section: misc' 'Priority: optional' 'Standards-Version: 4.7.0' \
           'Package: kvserve-cudnn-stub' 'Version: 9.0.0.312~cuda12+stub' \
           'Provides: nvidia-cudnn (= 9.0.0.312~cuda12), libcudnn.so.9' \
           'Conflicts: nvidia-cudnn' 'Architecture: amd64' \
           'Files: libcudnn.so.9 /usr/lib/x86_64-linux-gnu/' \
           'Description: link-only cuDNN stub for offline verification; not for GPU nodes' \
           ' Every cuDNN function LibTorch 2.6 imports, as an empty function.' > cudnn.ctl \
      && equivs-build cudnn.ctl >/dev/null && mv kvserve-cudnn-stub_*.deb /opt/kvserve/debs/ \
      && echo "builder-cuda: stub exports $(wc -l < symbols) cuDNN symbols"; \
    fi \
 && apt-get install -y /opt/kvserve/debs/*.deb \
 && apt-get install -y libtorch-cuda-dev nvidia-cuda-toolkit \
 && cd / && rm -rf /tmp/standin /var/lib/apt/lists/*
# With CUDNN=download the real cuDNN is installed now (nvidia-cudnn downloaded it). The runtime
# image gets those libraries in kvserve-cudnn, a package that provides nvidia-cudnn without
# its build-time dependency on the 2.5 GB nvidia-cuda-dev.
RUN if dpkg-query -W -f '${Status}' nvidia-cudnn 2>/dev/null | grep -q 'ok installed'; then \
      mkdir -p /tmp/cudnn && cd /tmp/cudnn \
      && libs="$(ls /usr/lib/x86_64-linux-gnu/libcudnn*.so.9* | tr '\n' ' ')" \
      && printf '%s\n' 'Section: misc' 'Priority: optional' 'Standards-Version: 4.7.0' \
           'Package: kvserve-cudnn' "Version: $(dpkg-query -W -f '${Version}' nvidia-cudnn)+kvserve" \
           "Provides: nvidia-cudnn (= $(dpkg-query -W -f '${Version}' nvidia-cudnn)), libcudnn.so.9" \
           'Conflicts: nvidia-cudnn' 'Architecture: amd64' \
           'Description: NVIDIA cuDNN libraries as nvidia-cudnn downloaded them' \
           ' The shared libraries only, for kvserve runtime-cuda images.' > cudnn.ctl \
      && for lib in $libs; do cp -a "$lib" .; echo "Files: $(basename "$lib") /usr/lib/x86_64-linux-gnu/"; done > files \
      && awk 'NR==1{printf "Files:"} {print " " $2 " " $3}' files >> cudnn.ctl \
      && equivs-build cudnn.ctl >/dev/null && mv kvserve-cudnn_*.deb /opt/kvserve/debs/ \
      && cd / && rm -rf /tmp/cudnn; \
    fi
COPY . /src
RUN --mount=type=cache,id=kvserve-ccache,target=/root/.cache/ccache \
    cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSERVE_BUILD_BENCH=OFF \
      | tee /tmp/configure.log \
 && grep -q 'kvserve: Torch 2\.6.*, CUDA ON' /tmp/configure.log \
 && cmake --build /build -j "${BUILD_JOBS:-$(nproc)}" --target kvserve kvctl kvserve-generate \
      kvserve_gpu_tests \
 && (ccache --show-stats | grep -Ei 'hits|misses' || true)
# The CUDA build on this machine: the gpu-labelled tests skip, printing why (they run on GPU
# nodes: scripts/gpu/), and --device cuda:0 is refused with that reason, exit status 2.
RUN /build/tests/model/kvserve_gpu_tests \
 && (/build/server/kvserve --device cuda:0; test $? -eq 2)
RUN mkdir -p /opt/kvserve/bin \
 && cp /build/server/kvserve /build/client/kvctl /build/model/kvserve-generate /opt/kvserve/bin/ \
 && strip --strip-unneeded /opt/kvserve/bin/* \
 && runtime-packages /opt/kvserve/bin/* | grep -vx 'kvserve-cudnn-stub\|kvserve-cudnn\|nvidia-cudnn' \
      > /opt/kvserve/runtime-packages.txt \
 && cat /opt/kvserve/runtime-packages.txt

# --- runtime images ---------------------------------------------------------------------------
FROM os AS runtime-base
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/kvserve --create-home \
      --shell /usr/sbin/nologin kvserve
EXPOSE 50051 8000 9400
STOPSIGNAL SIGTERM
WORKDIR /var/lib/kvserve
ENTRYPOINT ["kvserve"]
# The container default: every interface, so that a published port reaches it; the
# OpenAI-compatible HTTP API on 8000; Prometheus metrics on 9400. Arguments given to
# `docker run IMAGE ...` replace these. --insecure: plaintext
# gRPC on a non-loopback address, for TLS terminated in front of the container (mesh, gateway);
# to serve TLS itself, mount the certificates and pass --tls-cert-file and --tls-key-file
# (and --tls-client-ca-file for mutual TLS) instead of --insecure.
CMD ["--listen", "0.0.0.0:50051", "--insecure", "--http-listen", "0.0.0.0:8000", \
     "--metrics-listen", "0.0.0.0:9400"]

FROM runtime-base AS runtime-cpu
COPY --from=builder-cpu /opt/kvserve/runtime-packages.txt /tmp/
RUN apt-get update && xargs -a /tmp/runtime-packages.txt apt-get install -y \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log /tmp/* \
 && find /usr/share/doc -type f ! -name copyright -delete \
 && rm -rf /usr/share/man /usr/share/info
COPY --from=builder-cpu /opt/kvserve/bin/ /usr/local/bin/
USER kvserve
RUN kvserve --help >/dev/null && kvctl --help >/dev/null
ARG VCS_REF=unknown
ARG BUILD_DATE=unknown
LABEL org.opencontainers.image.title="kvserve (CPU)" \
      org.opencontainers.image.description="KV-cache-centred gRPC inference server for causal language models; LibTorch 2.6 CPU on Debian trixie" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.created="${BUILD_DATE}" \
      org.opencontainers.image.base.name="docker.io/library/debian:trixie" \
      org.opencontainers.image.vendor="kvserve"

FROM runtime-base AS runtime-cuda
COPY --from=builder-cuda /opt/kvserve/runtime-packages.txt /opt/kvserve/debs/ /tmp/kvserve/
RUN apt-get update \
 && apt-get install -y /tmp/kvserve/*.deb \
 && xargs -a /tmp/kvserve/runtime-packages.txt apt-get install -y \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log /tmp/* \
 && find /usr/share/doc -type f ! -name copyright -delete \
 && rm -rf /usr/share/man /usr/share/info
COPY --from=builder-cuda /opt/kvserve/bin/ /usr/local/bin/
# What the NVIDIA Container Toolkit reads: expose the GPUs and mount the compute driver.
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER kvserve
RUN kvserve --help >/dev/null && kvctl --help >/dev/null
ARG VCS_REF=unknown
ARG BUILD_DATE=unknown
ARG CUDNN=download
LABEL org.opencontainers.image.title="kvserve (CUDA)" \
      org.opencontainers.image.description="KV-cache-centred gRPC inference server for causal language models; LibTorch 2.6 with CUDA 12.4 on Debian trixie" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.created="${BUILD_DATE}" \
      org.opencontainers.image.base.name="docker.io/library/debian:trixie" \
      org.opencontainers.image.vendor="kvserve" \
      io.kvserve.cudnn="${CUDNN}"
