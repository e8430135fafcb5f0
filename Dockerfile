# The hami image: hami-core with its servers, every backend, and libvgpu.so (shipped in
# the hami-nvidia wheel). Used by every component of charts/hami.
#
#   docker build -t <registry>/hami:0.1.0 .
#   docker build --build-arg EXTRAS=server,defrag -t <registry>/hami:0.1.0-defrag .
#
# EXTRAS: hami-core's extras installed (default server). server,defrag adds HiGHS
# (highspy and numpy: +67.5 MB, +20 MB gzipped), so the scheduler's consolidation plans
# with its integer program first; without it the search plans alone
# (docs/consolidation.md, *The image*).
#
# scripts/build-image.py builds the same content without a container engine (Debian's
# packages + the same wheels + scripts/image/install-hami.sh), as an OCI image tarball.

# --- build: the wheels (libvgpu.so is compiled by hami-nvidia's build) -----------------
ARG EXTRAS=server
FROM debian:bookworm-slim AS build
ARG EXTRAS
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN python3 -m venv /opt/build \
 && /opt/build/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/build/bin/pip wheel --no-cache-dir -w /wheels "/src[${EXTRAS}]" /src/backends/hami-*

# --- runtime: python3 and the installed wheels only -------------------------------------
FROM debian:bookworm-slim
ARG EXTRAS
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /tmp/wheels
COPY scripts/image/install-hami.sh /tmp/install-hami.sh
RUN HAMI_EXTRAS="${EXTRAS}" sh /tmp/install-hami.sh /tmp/wheels && rm -rf /tmp/wheels /tmp/install-hami.sh
ENV PATH=/opt/hami/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1
ENTRYPOINT ["/opt/hami/bin/hami"]
CMD ["--help"]
