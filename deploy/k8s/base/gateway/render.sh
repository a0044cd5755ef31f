#!/bin/sh
# Renders nginx.conf here from deploy/gateway/nginx.conf.template for the StatefulSet's pods
# (kvserve-N.kvserve-headless:50051, and :8000 for the HTTP API; N < 3). Run it after changing the template, the replica
# count, the service name or the ports; tests/e2e/test_k8s_manifests.py fails while the
# committed nginx.conf differs from what this writes. Extra arguments go to render.py (the
# test adds --out FILE).
here=$(dirname "$0")
exec /usr/bin/python3 "$here/../../../gateway/render.py" \
  --statefulset kvserve --service kvserve-headless --replicas 3 --port 50051 --http-port 8000 \
  --http-listen 8000 \
  --listen 8080 --health-listen 8081 --runtime-dir /tmp/kvserve-gateway \
  --access-log /dev/stdout --error-log /dev/stderr --worker-processes 2 \
  --out "$here/nginx.conf" "$@"
