#!/usr/bin/env bash
# The conformance matrix over two real network hosts: two network namespaces joined by a veth
# pair (with tc netem latency and a rate limit where the kernel has it), two ranks in each, so
# that ranks of one namespace share memory and reach the other namespace only over the veth:
# the hierarchical allreduce's real shape (shared memory within a host, TCP across). Every rank
# must report OK and all must compute identical allreduce bits. Needs root and `ip netns`;
# exits 77 (skipped) otherwise. Deletes everything it created.
set -euo pipefail

conformance=${1:?usage: hier_conformance.sh PATH/TO/ddp-conformance [ranks-per-host]}
per_host=${2:-2}
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
  echo "hier_conformance: needs root and ip netns: skipped" >&2
  exit 77
fi

tag="ddph$$"
ns=("${tag}a" "${tag}b")
net=$(( $$ % 200 + 20 ))
addr=("10.214.$net.1" "10.214.$net.2")
out=$(mktemp -d)
cleanup() {
  ip netns del "${ns[0]}" 2>/dev/null || true
  ip netns del "${ns[1]}" 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT

ip netns add "${ns[0]}" || { echo "hier_conformance: cannot create namespaces: skipped" >&2; exit 77; }
ip netns add "${ns[1]}"
ip link add "${tag}x" type veth peer name "${tag}y"
ip link set "${tag}x" netns "${ns[0]}"
ip link set "${tag}y" netns "${ns[1]}"
for i in 0 1; do
  dev=$([[ $i -eq 0 ]] && echo "${tag}x" || echo "${tag}y")
  ip -n "${ns[$i]}" addr add "${addr[$i]}/24" dev "$dev"
  ip -n "${ns[$i]}" link set "$dev" up
  ip -n "${ns[$i]}" link set lo up
  # A real link is not instantaneous: 100 us each way and 5 Gbit/s where netem exists.
  ip netns exec "${ns[$i]}" tc qdisc add dev "$dev" root netem delay 100us rate 5gbit \
    2>/dev/null || echo "hier_conformance: no tc netem here; running without latency" >&2
done

np=$(( 2 * per_host ))
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$(( 30000 + $$ % 20000 ))
pids=()
for (( r = 0; r < np; r++ )); do
  side=$(( r / per_host ))
  ip netns exec "${ns[$side]}" env DDP_RANK=$r DDP_SIZE=$np DDP_JOB_TOKEN="$token" \
    DDP_RENDEZVOUS_ADDR="${addr[0]}" DDP_RENDEZVOUS_PORT=$port DDP_HOSTNAME="host$side" \
    DDP_ALGO=hier DDP_TIMEOUT_SECONDS=120 \
    timeout 900 "$conformance" --quick >"$out/rank$r.txt" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
for (( r = 0; r < np; r++ )); do
  if ! grep -q "status=OK" "$out/rank$r.txt"; then
    echo "hier_conformance: rank $r failed:" >&2
    tail -n 20 "$out/rank$r.txt" >&2
    status=1
  fi
done
digests=$(grep -h '^digest=' "$out"/rank*.txt | sort -u | wc -l)
if [[ $digests -ne 1 ]]; then
  echo "hier_conformance: ranks computed different allreduce bits ($digests digests)" >&2
  status=1
fi
[[ $status -eq 0 ]] && echo "hier_conformance: $np ranks on 2 network namespaces: OK"
exit $status
