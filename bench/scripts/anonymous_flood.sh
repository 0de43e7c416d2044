#!/usr/bin/env bash
# Store bytes and fsyncs per N anonymous requests against the real binary (issue 15): N
# tokenless POST /mcp, then N GET /callback/github with an unknown state, on loopback only.
# fsyncs are counted with strace attached to the proxy (fsync and fdatasync, every thread);
# bytes are the sled store directory's size on disk (du -sb) before and after.
#
#   bench/scripts/anonymous_flood.sh BINARY [N]
#
# EXTRA_TOML is appended to the configuration (a binary with a rate limit on
# /callback/github needs it raised to measure the refusal path rather than the 429s).
set -euo pipefail
BIN=${1:?usage: anonymous_flood.sh BINARY [N]}
N=${2:-10000}
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
admin=$(free_port)
cat > "$dir/proxy.toml" <<EOF
[server]
public_url = "http://127.0.0.1:$port"
listen = "127.0.0.1:$port"
[github]
client_id = "flood-client"
client_secret = "flood-secret"
scopes = ["read:user"]
[admin]
listen = "127.0.0.1:$admin"
[store]
path = "$dir/store"
${EXTRA_TOML:-}
EOF
RUST_LOG=warn "$BIN" serve --config "$dir/proxy.toml" > "$dir/log" 2>&1 &
pid=$!
for _ in $(seq 200); do
  curl -sf "http://127.0.0.1:$admin/healthz" > /dev/null && break
  sleep 0.1
done
sleep 1
before=$(du -sb "$dir/store" | cut -f1)
strace -f -c -e trace=fsync,fdatasync,sync_file_range,msync -p "$pid" -o "$dir/strace" 2> "$dir/strace.attach" &
tracer=$!
sleep 1
for i in $(seq "$N"); do if [ "$i" -gt 1 ]; then echo next; fi; echo "url = \"http://127.0.0.1:$port/mcp\""; echo 'request = "POST"'; echo 'data = "{}"'; echo 'header = "Content-Type: application/json"'; echo 'output = "/dev/null"'; done > "$dir/mcp.curl"
for i in $(seq "$N"); do if [ "$i" -gt 1 ]; then echo next; fi; echo "url = \"http://127.0.0.1:$port/callback/github?state=flood$i&code=x\""; echo 'output = "/dev/null"'; done > "$dir/cb.curl"
start=$(date +%s.%N)
curl -s --no-progress-meter --parallel --parallel-max 32 -K "$dir/mcp.curl" -w '%{http_code}\n' | sort | uniq -c | sed 's/^/  mcp status: /'
mid=$(du -sb "$dir/store" | cut -f1)
curl -s --no-progress-meter --parallel --parallel-max 32 -K "$dir/cb.curl" -w '%{http_code}\n' | sort | uniq -c | sed 's/^/  callback status: /'
end=$(date +%s.%N)
sleep 1
after=$(du -sb "$dir/store" | cut -f1)
kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true
syncs() { awk -v c="$1" '$NF==c {print $4}' "$dir/strace" | head -1; }
echo "requests: $N tokenless /mcp + $N bad callbacks in $(awk -v a="$start" -v b="$end" "BEGIN{printf \"%.1f\", b-a}") s"
echo "store bytes: before $before, after /mcp $mid (+$((mid - before))), after callbacks $after (+$((after - mid)))"
echo "disk syncs during the flood: $(syncs fsync || true) fsync, $(syncs fdatasync || true) fdatasync, $(syncs sync_file_range || true) sync_file_range"
cat "$dir/strace"
echo "threads attached by strace: $(grep -c attached "$dir/strace.attach" || true) of $(ls /proc/$pid/task | wc -l)"
if curl -sf "http://127.0.0.1:$admin/metrics" | grep -E '^mcp_proxy_(store_disk_flushes|rejections)_total' ; then :; fi
