#!/bin/sh
# kvserve gateway entrypoint (Kubernetes): runs nginx with the rendered configuration and keeps
# its upstream list in step with which replicas are ready and where they are.
#
#   entrypoint.sh NGINX_CONF RUNTIME_DIR
#
# nginx resolves upstream names only when it (re)loads its configuration, and has no active
# health checks. The headless Service publishes kvserve-N.kvserve-headless only while replica N
# is ready, so every GATEWAY_RESYNC_SECONDS this script looks the replicas up:
# - a replica that does not resolve (loading, warming its prefixes, draining, gone) has its
#   server line replaced by a placeholder marked down, which takes it off the hash ring as if it
#   were absent: its keys go to the next replica on the ring, and come back when it is ready;
# - when the set of ready replicas or one of their addresses changes, nginx reloads gracefully
#   (calls in flight finish on the old workers).
# SIGTERM becomes nginx's graceful stop (SIGQUIT).
set -u

source_conf=${1:?usage: entrypoint.sh NGINX_CONF RUNTIME_DIR}
runtime_dir=${2:?usage: entrypoint.sh NGINX_CONF RUNTIME_DIR}
interval=${GATEWAY_RESYNC_SECONDS:-5}
conf="$runtime_dir/nginx.conf"

# The replicas as rendered: the upstream's "server HOST:PORT max_fails=..." lines.
replicas=$(awk '$1 == "server" && $3 ~ /^max_fails=/ { print $2 }' "$source_conf")
if [ -z "$replicas" ]; then
  echo "gateway: no replica server lines in $source_conf" >&2
  exit 1
fi

# One "HOST:PORT ADDRESS" line per replica that resolves now.
ready_replicas() {
  for replica in $replicas; do
    address=$(getent hosts "${replica%:*}" | awk 'NR == 1 { print $1 }')
    if [ -n "$address" ]; then echo "$replica $address"; fi
  done
}

# Writes $conf: $source_conf with every replica missing from $1 replaced by a down placeholder.
write_conf() {
  printf '%s\n' "$1" >"$runtime_dir/ready"
  awk 'NR == FNR { ready[$1] = 1; next }
       $1 == "server" && $3 ~ /^max_fails=/ && !($2 in ready) {
         print "        server 127.0.0.1:9 down;  # " $2 " is not ready"
         next
       }
       { print }' "$runtime_dir/ready" "$source_conf" >"$conf.next" &&
    mv "$conf.next" "$conf"
}

# "2 of 3 replicas ready: HOST:PORT HOST:PORT" for the log.
describe() {
  printf '%s\n' "$1" | awk -v total="$(echo "$replicas" | wc -w)" '
    NF > 0 { names = names " " $1; n++ }
    END { printf "%d of %d replicas ready:%s\n", n, total, names }'
}

mkdir -p "$runtime_dir"
state=$(ready_replicas)
write_conf "$state"
echo "gateway: starting; $(describe "$state")" >&2
nginx -p "$runtime_dir" -c "$conf" -e stderr -g 'daemon off;' &
nginx_pid=$!
stopping=
trap 'stopping=1; kill -QUIT "$nginx_pid" 2>/dev/null' TERM INT

while [ -z "$stopping" ] && kill -0 "$nginx_pid" 2>/dev/null; do
  # In the background, so that SIGTERM interrupts the wait at once.
  sleep "$interval" &
  wait $! 2>/dev/null
  if [ -n "$stopping" ] || ! kill -0 "$nginx_pid" 2>/dev/null; then break; fi
  next_state=$(ready_replicas)
  [ "$next_state" = "$state" ] && continue
  write_conf "$next_state"
  if nginx -t -q -p "$runtime_dir" -c "$conf" -e stderr; then
    echo "gateway: reloading; $(describe "$next_state")" >&2
    kill -HUP "$nginx_pid"
    state=$next_state
  else
    echo "gateway: the new configuration does not load; keeping the running one" >&2
  fi
done
wait "$nginx_pid"
