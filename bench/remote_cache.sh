#!/usr/bin/env bash
# The remote cache on loopback against a real nginx WebDAV server (started here, stopped by
# pid at exit):
#   1. the project's own pipeline: a fresh clone with an empty local store and a warm remote
#      against a cold local build (no remote);
#   2. wide500 (bench/pipeline_gen.py, 500 small command nodes): per-node cost of an upload
#      (cold build with a remote vs without) and of a remote hit (fresh clone, warm remote, vs
#      the same outputs restored from the local store);
#   3. the no-op build with the remote configured against without it (hyperfine).
#
#   SKYCTL=target/release/skyctl RUNS=5 bash bench/remote_cache.sh
#
# Needs a release skyctl, nginx (apt-get install nginx) and hyperfine.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
SKYCTL=${SKYCTL:-$REPO/target/release/skyctl}
RUNS=${RUNS:-5}
[ -x "$SKYCTL" ] || { echo "no skyctl at $SKYCTL (cargo build --release -p skyctl)" >&2; exit 2; }
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { echo "nginx missing: apt-get install nginx" >&2; exit 2; }
command -v hyperfine >/dev/null || { echo "hyperfine missing: apt-get install hyperfine" >&2; exit 2; }
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
unset SKYCTL_STORE SKYCTL_REMOTE_CACHE SKYCTL_REMOTE_CACHE_READ_ONLY SKYCTL_REMOTE_CACHE_HEADER \
  SKYCTL_REMOTE_CACHE_SIGNING_KEY SKYCTL_REMOTE_CACHE_TIMEOUT

W=$(mktemp -d /tmp/skyctl-remote-bench.XXXXXX)
NGINX_PID=
cleanup() { [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$W/ngx/data" "$W/ngx/tmp"
user=""; [ "$(id -u)" -eq 0 ] && user="user root;"
cat > "$W/ngx/nginx.conf" <<CONF
daemon off; master_process off; $user
pid $W/ngx/nginx.pid; error_log $W/ngx/error.log warn;
events { worker_connections 512; }
http {
  access_log off;
  client_body_temp_path $W/ngx/tmp/body; proxy_temp_path $W/ngx/tmp/p; fastcgi_temp_path $W/ngx/tmp/f;
  uwsgi_temp_path $W/ngx/tmp/u; scgi_temp_path $W/ngx/tmp/s;
  client_max_body_size 0; keepalive_requests 100000;
  server {
    listen 127.0.0.1:$PORT; root $W/ngx/data;
    location / { dav_methods PUT; create_full_put_path on; dav_access user:rw group:r all:r; }
  }
}
CONF
"$NGINX" -p "$W/ngx" -c "$W/ngx/nginx.conf" -e "$W/ngx/error.log" & NGINX_PID=$!
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.05; done
BASE=http://127.0.0.1:$PORT

ms() { date +%s%3N; }
# time_ms DIR ARGS...: wall ms of one `skyctl build ARGS` in DIR (must succeed)
time_ms() {
  local dir=$1; shift
  local t0; t0=$(ms)
  (cd "$dir" && "$SKYCTL" build "$@" >/dev/null 2>"$W/last.err") || { cat "$W/last.err" >&2; exit 1; }
  echo $(( $(ms) - t0 ))
}
median() { tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
clone() { rm -rf "$1"; mkdir -p "$1"; cp -r "$REPO/pipeline.toml" "$REPO/models" "$REPO/golden" "$1/"; }

echo "== project pipeline ($(cd "$REPO" && "$SKYCTL" graph --format json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["nodes"]))') nodes)"
clone "$W/p0"
cold=$(time_ms "$W/p0")
echo "cold local build, no remote: $cold ms"
clone "$W/p1"
fill=$(time_ms "$W/p1" --remote-cache "$BASE/project")
echo "cold build filling the remote: $fill ms"
fresh=()
for i in $(seq "$RUNS"); do
  clone "$W/p2"
  fresh+=("$(time_ms "$W/p2" --remote-cache "$BASE/project")")
done
f=$(echo "${fresh[*]}" | median)
echo "fresh clone, empty store, warm remote: ${fresh[*]} ms, median $f ms ($(python3 -c "print(f'{$cold/$f:.1f}')")x faster than cold)"
if diff -r "$W/p1/site/public" "$W/p2/site/public" >/dev/null; then echo "release byte-identical to the filling clone's"; else echo "RELEASE DIFFERS"; fi

echo "== wide500"
python3 "$REPO/bench/pipeline_gen.py" "$W/w" wide500 >/dev/null
reset() { rm -rf "$W/w/out" "$W/w/.skyctl" "$W/w/site"; }
local_cold=(); remote_cold=(); remote_hit=(); local_hit=()
for i in $(seq "$RUNS"); do
  reset; local_cold+=("$(time_ms "$W/w")")
  reset; remote_cold+=("$(time_ms "$W/w" --remote-cache "$BASE/wide-$i")")
  reset; remote_hit+=("$(time_ms "$W/w" --remote-cache "$BASE/wide-$i")")
  rm -rf "$W/w/out" "$W/w/site"; local_hit+=("$(time_ms "$W/w")")
done
lc=$(echo "${local_cold[*]}" | median); rc=$(echo "${remote_cold[*]}" | median)
rh=$(echo "${remote_hit[*]}" | median); lh=$(echo "${local_hit[*]}" | median)
echo "cold, no remote:            ${local_cold[*]} ms, median $lc"
echo "cold, uploading:            ${remote_cold[*]} ms, median $rc"
echo "fresh store, remote hits:   ${remote_hit[*]} ms, median $rh"
echo "outputs restored locally:   ${local_hit[*]} ms, median $lh"
python3 -c "print(f'upload overhead per node: {($rc-$lc)/500:.2f} ms; remote hit per node: {$rh/500:.2f} ms ({($rh-$lh)/500:.2f} ms over a local restore)')"

echo "== no-op, with and without the remote (project pipeline, wide500)"
for d in "$W/p2" "$W/w"; do
  (cd "$d" && "$SKYCTL" build >/dev/null 2>&1)
  (cd "$d" && hyperfine -N -w 3 -r 30 --export-json "$W/noop.json" \
     "$SKYCTL build" "$SKYCTL build --remote-cache $BASE/project" >/dev/null)
  python3 - "$W/noop.json" "$d" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
print(sys.argv[2].rsplit("/", 1)[-1], "no-op:", ", ".join(f"{x['command'].split(' ', 2)[-1] if '--remote' in x['command'] else 'no remote'}: median {x['median']*1000:.1f} ms (mean {x['mean']*1000:.1f} +- {x['stddev']*1000:.1f})" for x in r))
PY
done
