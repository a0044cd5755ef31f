#!/usr/bin/python3
"""Renders the kvserve gateway's nginx configuration from nginx.conf.template.

The replicas are given either one by one (--replica HOST:PORT, repeatable, in ring order) or as
the pods of a StatefulSet behind a headless Service (--statefulset NAME --service SVC
--replicas N --port P: NAME-0.SVC:P ... NAME-<N-1>.SVC:P, names that resolve in the
StatefulSet's namespace). Standard library only.

  deploy/gateway/render.py --replica 127.0.0.1:50051 --replica 127.0.0.1:50052 \\
      --listen 127.0.0.1:8080 --health-listen 127.0.0.1:8081 --runtime-dir /tmp/gw \\
      --out /tmp/gw/nginx.conf
  nginx -p /tmp/gw -c /tmp/gw/nginx.conf -e stderr -g 'daemon off;'
"""
import argparse
import os
import re
import sys

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nginx.conf.template")
PLACEHOLDER = re.compile(r"@([A-Z_]+)@")
# What a replica address may look like: a host name or IPv4 address, or a bracketed IPv6
# address, then a port. Anything else could inject nginx directives.
ADDRESS = re.compile(r"^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$")
LISTEN = re.compile(r"^(?:(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):)?[0-9]{1,5}$")
# max_fails/fail_timeout: see the comment above @UPSTREAM_SERVERS@ in the template.
SERVER_LINE = "        server {address} max_fails=1 fail_timeout=10s;"


def statefulset_replicas(statefulset, service, count, port):
    """The stable DNS names of a StatefulSet's pods, as HOST:PORT, in ordinal order."""
    return [f"{statefulset}-{i}.{service}:{port}" for i in range(count)]


HTTP_SECTION = re.compile(r"^ *# @HTTP_BEGIN@.*?# @HTTP_END@\n\n?", re.S | re.M)


def render(template, replicas, listen, health_listen, runtime_dir, access_log, error_log,
           worker_processes, http_replicas=(), http_listen="0.0.0.0:8000"):
    """The template with every placeholder filled; ValueError for a bad value. Without
    `http_replicas` (the replicas' OpenAI-compatible HTTP addresses) the HTTP part is left
    out."""
    if not replicas:
        raise ValueError("at least one replica is required")
    http_replicas = list(http_replicas)
    for address in replicas + http_replicas:
        if not ADDRESS.match(address):
            raise ValueError(f"replica address {address!r} is not HOST:PORT")
    if len(set(replicas)) != len(replicas) or len(set(http_replicas)) != len(http_replicas):
        raise ValueError("a replica is listed twice")
    for flag, value in (("--listen", listen), ("--health-listen", health_listen),
                        ("--http-listen", http_listen)):
        if not LISTEN.match(value):
            raise ValueError(f"{flag} {value!r} is not [HOST:]PORT")
    for flag, value in (("--runtime-dir", runtime_dir), ("--access-log", access_log),
                        ("--error-log", error_log)):
        if not value or re.search(r"[\s;{}'\"#$]", value):
            raise ValueError(f"{flag} {value!r} must be a path without spaces or ;{{}}'\"#$")
    if worker_processes != "auto" and not (worker_processes.isdigit() and
                                           int(worker_processes) > 0):
        raise ValueError(f"--worker-processes {worker_processes!r} is not auto or a count")
    values = {
        "UPSTREAM_SERVERS": "\n".join(SERVER_LINE.format(address=a) for a in replicas),
        # Every replica may be tried once before the call fails.
        "NEXT_UPSTREAM_TRIES": str(len(replicas)),
        "LISTEN": listen,
        "HEALTH_LISTEN": health_listen,
        "RUNTIME_DIR": runtime_dir.rstrip("/") or "/",
        "ACCESS_LOG": access_log,
        "ERROR_LOG": error_log,
        "WORKER_PROCESSES": worker_processes,
        "HTTP_UPSTREAM_SERVERS": "\n".join(SERVER_LINE.format(address=a) for a in http_replicas),
        "HTTP_LISTEN": http_listen,
    }
    if not http_replicas:
        template = HTTP_SECTION.sub("", template)
    else:
        template = template.replace("# @HTTP_BEGIN@ (render.py leaves this part out when no "
                                    "replica HTTP port is given)\n    ", "")
        template = template.replace("    # @HTTP_END@\n", "")
    unknown = sorted(set(PLACEHOLDER.findall(template)) - set(values))
    if unknown:
        raise ValueError(f"the template has unknown placeholders: {', '.join(unknown)}")
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", default=TEMPLATE)
    parser.add_argument("--replica", action="append", default=[], metavar="HOST:PORT",
                        help="a replica's gRPC address (repeatable)")
    parser.add_argument("--statefulset", help="StatefulSet whose pods are the replicas")
    parser.add_argument("--service", help="the StatefulSet's headless Service")
    parser.add_argument("--replicas", type=int, help="the StatefulSet's replica count")
    parser.add_argument("--port", type=int, default=50051, help="the replicas' gRPC port")
    parser.add_argument("--http-replica", action="append", default=[], metavar="HOST:PORT",
                        help="a replica's OpenAI-compatible HTTP address (repeatable)")
    parser.add_argument("--http-port", type=int,
                        help="the StatefulSet replicas' HTTP port (--http-listen); none: no HTTP")
    parser.add_argument("--http-listen", default="0.0.0.0:8000",
                        help="HTTP address of the gateway's OpenAI-compatible API")
    parser.add_argument("--listen", default="0.0.0.0:8080", help="gRPC address of the gateway")
    parser.add_argument("--health-listen", default="0.0.0.0:8081",
                        help="HTTP address of /healthz and /stub_status")
    parser.add_argument("--runtime-dir", default="/tmp/kvserve-gateway",
                        help="writable directory for the pid file and temporary files")
    parser.add_argument("--access-log", default="/dev/stdout")
    parser.add_argument("--error-log", default="/dev/stderr")
    parser.add_argument("--worker-processes", default="2")
    parser.add_argument("--out", help="file to write (default: stdout)")
    args = parser.parse_args(argv)

    replicas = list(args.replica)
    if args.statefulset or args.service or args.replicas is not None:
        if not (args.statefulset and args.service and args.replicas):
            parser.error("--statefulset, --service and --replicas go together")
        replicas += statefulset_replicas(args.statefulset, args.service, args.replicas,
                                         args.port)
    http_replicas = list(args.http_replica)
    if args.http_port is not None:
        if not args.statefulset:
            parser.error("--http-port goes with --statefulset")
        http_replicas += statefulset_replicas(args.statefulset, args.service, args.replicas,
                                              args.http_port)
    with open(args.template, encoding="utf-8") as f:
        template = f.read()
    try:
        text = render(template, replicas, args.listen, args.health_listen, args.runtime_dir,
                      args.access_log, args.error_log, args.worker_processes, http_replicas,
                      args.http_listen)
    except ValueError as error:
        parser.error(str(error))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
