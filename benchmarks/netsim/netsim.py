#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A cluster of simulated hosts on this machine: one network namespace per host, each with its own
address on a common bridge, links limited with `tc`. Created on entry, always deleted on exit.

    with Cluster(4, rate="1gbit") as c:
        c.run(0, ["ddprun", "-np", "8", "-H", c.hosts_arg(2), "--rsh", c.rsh, ...])

    python3 benchmarks/netsim/netsim.py --hosts 4 --rate 1gbit -- COMMAND...
        runs COMMAND in host 0 with NETSIM_HOSTS (the addresses, comma-separated), NETSIM_RSH
        (a remote shell entering a host: RSH HOST 'COMMAND LINE', as ssh takes it) and
        NETSIM_NAMESPACES set, then deletes the cluster.

What is emulated: each host's link to the bridge is a veth pair; with a rate, a token-bucket
filter (`tc qdisc ... tbf`) limits both directions, at the host's end (what it sends) and at
the bridge's end (what it receives). TCP's congestion control is the machine's unless chosen
(`congestion=`; a namespace may pick only from net.ipv4.tcp_allowed_congestion_control).
Latency would need `sch_netem`; where the kernel has it,
`delay` adds it on both ends, elsewhere the call fails saying so. The bridge lives in a namespace
of its own, so nothing here touches the machine's own interfaces or routes, and no packet leaves
the cluster. Commands run in a host get its own host name (host0, host1, ...: a UTS namespace
each), but all hosts share /dev/shm and the file system.

Named hosts (`names=`, e.g. the pods of an MPIJob) get those host names (the namespaces keep the
cluster's own tag, so that two clusters of the same names never meet), and every host resolves
every other by name, and by NAME.DOMAIN with `domain=` (a cluster DNS's records), through a hosts
file that `ip netns exec` puts over /etc/hosts (/etc/netns/NAMESPACE/hosts, deleted with the
cluster).
Needs root and iproute2.
"""
from __future__ import annotations

import argparse
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile

SUBNET = "10.216.0"  # every cluster has its own bridge namespace, so clusters never collide

# libddp's cost model (bindings/python/ddp_model/, pure Python): the framing share is its. A
# Python without it (the deployment checks' venv, which uses the namespaces alone) has no
# frame_efficiency().
try:
    import ddp_model as _model
except ImportError:
    _model = None


class NetsimError(RuntimeError):
    pass


def available() -> str | None:
    """None if clusters can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "needs iproute2's ip"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns does not work here: {probe.stderr.strip()}"
    return None


def allowed_congestion() -> list[str]:
    """The TCP congestion controls a network namespace may choose on this machine."""
    with open("/proc/sys/net/ipv4/tcp_allowed_congestion_control", encoding="utf-8") as f:
        return f.read().split()


def congestion_in(namespace: str | None = None) -> str:
    """The TCP congestion control new connections get (in NAMESPACE, else here)."""
    cmd = ["sysctl", "-n", "net.ipv4.tcp_congestion_control"]
    if namespace:
        cmd = ["ip", "netns", "exec", namespace, *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise NetsimError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _tc(namespace: str, *args: str) -> None:
    done = subprocess.run(["ip", "netns", "exec", namespace, "tc", *args], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise NetsimError(f"tc {' '.join(args)} in {namespace}: {done.stderr.strip()}")


def rate_bits(text: str) -> float:
    """tc's rate syntax, decimal units: 1gbit -> 1e9 bits/s."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)bit", text.lower())
    if not m:
        raise ValueError(f"rate {text!r}: say 1gbit, 400mbit")
    return float(m.group(1)) * 1000 ** "_kmgt".index(m.group(2) or "_")


def frame_efficiency(mtu: int | None = None) -> float:
    """The most of a link's rate that TCP payload gets with this MTU (1500 if None): each
    Ethernet frame carries MTU - 52 bytes of it (20 of IPv4 header, 20 of TCP header and 12 of
    the timestamps option Linux sends) and takes MTU + 14 bytes of the link (its Ethernet
    header, which tc's rate counts on a veth). 1500: 95.6%; 9001: 99.3%. The cost model's
    (ddp_model.frame_share)."""
    if _model is None:
        raise NetsimError("frame_efficiency needs libddp's cost model (ddp_model): run with the "
                          "Python that `make build` installs libddp into (.venv/bin/python)")
    return _model.frame_share(mtu)


class Cluster:
    """H hosts at SUBNET.1 .. SUBNET.H. RATE (tc's syntax: 1gbit, 400mbit) limits every link in
    both directions; DELAY (e.g. 100us) needs sch_netem. CONGESTION sets every host's TCP
    congestion control (net.ipv4.tcp_congestion_control in its namespace; one of the machine's
    tcp_allowed_congestion_control); None keeps what a new namespace gets (the machine's).
    MTU sets every link's (veth ends and bridge), e.g. 9001 as AWS's VPC networks (EFA, ENA)
    use; None keeps veth's 1500. The link's rate counts whole frames, so framing takes a share
    of it: frame_efficiency(mtu) is what TCP payload can get of it at most."""

    def __init__(self, hosts: int, rate: str | None = None, delay: str | None = None,
                 names: list[str] | None = None, domain: str | None = None,
                 sshd_env: bool = False, congestion: str | None = None,
                 mtu: int | None = None):
        if not 1 <= hosts <= 200:
            raise ValueError(f"hosts must be 1..200, not {hosts}")
        if mtu is not None and not 1280 <= mtu <= 65535:
            raise ValueError(f"mtu must be 1280..65535, not {mtu}")
        if rate is not None:
            rate_bits(rate)  # refuses what tc would not take, before anything is made
        if names is not None and (len(names) != hosts or len(set(names)) != hosts or not all(
                re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", n) for n in names)):
            raise ValueError(f"names must be {hosts} distinct DNS labels, not {names}")
        if domain is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", domain):
            raise ValueError(f"domain {domain!r} is not a DNS name")
        if congestion is not None and congestion not in allowed_congestion():
            raise ValueError(f"congestion control {congestion!r} is not one a namespace may "
                             f"choose here (net.ipv4.tcp_allowed_congestion_control: "
                             f"{' '.join(allowed_congestion())})")
        self.size, self.rate, self.delay = hosts, rate, delay
        self.congestion, self.mtu = congestion, mtu
        self.tag = f"ns{os.getpid() % 100000}{secrets.token_hex(2)}"
        self.bridge = f"{self.tag}br"
        # Namespaces are named by the tag, never by the hosts' names: two clusters of the same
        # host names (two runs of one test suite on a machine) must not take each other's.
        self.namespaces = [f"{self.tag}h{i}" for i in range(hosts)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(hosts)]
        # Each host's own host name (a UTS namespace per command): Open MPI keys its session
        # directories and shared-memory files by it, libddp its idea of "same host".
        self.hostnames = list(names) if names else [f"host{i}" for i in range(hosts)]
        self.named, self.domain = names is not None, domain
        # sshd_env: the remote shell starts commands with the environment an sshd session has
        # (PATH, HOME, LANG only), not the caller's, as ssh to a real host (or pod) does.
        self.sshd_env = sshd_env
        # What the remote shell answers to for each host: its address, and its names if named.
        self.aliases = [[a] + ([h] + ([f"{h}.{domain}"] if domain else []) if self.named else [])
                        for a, h in zip(self.addresses, self.hostnames)]
        self.rsh = ""
        self._dir = ""
        self._made: list[str] = []
        self._etc: list[str] = []

    def __enter__(self) -> "Cluster":
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _create(self) -> None:
        for namespace in (self.bridge, *self.namespaces):
            if os.path.exists(f"/var/run/netns/{namespace}"):
                raise NetsimError(f"a network namespace named {namespace} exists already "
                                  f"(left by a run that was killed: ip netns del {namespace})")
            _ip("netns", "add", namespace)
            self._made.append(namespace)
        if self.named:
            self._write_hosts_files()
        _ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge, "link", "set", "br0", "up")
        for i, (namespace, address) in enumerate(zip(self.namespaces, self.addresses)):
            port = f"p{i}"
            _ip("-n", namespace, "link", "add", "eth0", "type", "veth", "peer", "name", port,
                "netns", self.bridge)
            _ip("-n", self.bridge, "link", "set", port, "master", "br0", "up")
            if self.mtu:
                _ip("-n", namespace, "link", "set", "eth0", "mtu", str(self.mtu))
                _ip("-n", self.bridge, "link", "set", port, "mtu", str(self.mtu))
            _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            for where, dev in ((namespace, "eth0"), (self.bridge, port)):
                self._shape(where, dev)
            if self.congestion:
                done = subprocess.run(["ip", "netns", "exec", namespace, "sysctl", "-qw",
                                       f"net.ipv4.tcp_congestion_control={self.congestion}"],
                                      capture_output=True, text=True)
                if done.returncode != 0:
                    raise NetsimError(f"congestion control {self.congestion} in {namespace}: "
                                      f"{done.stderr.strip()}")
        self._dir = tempfile.mkdtemp(prefix="netsim-")
        # Not named ssh or rsh: Open MPI adds ssh's own options to agents of those names.
        self.rsh = os.path.join(self._dir, "enter")
        cases = "".join(f"  {'|'.join(names)}) ns={n} name={h} ;;\n"
                        for names, n, h in zip(self.aliases, self.namespaces, self.hostnames))
        with open(self.rsh, "w", encoding="utf-8") as f:
            f.write("#!/bin/sh\n# ENTER [SSH OPTIONS] HOST COMMAND...: runs the command line in"
                    " that host's namespace,\n# joining the words as ssh does (ddprun passes"
                    " one, mpirun several); ssh's\n# options (-o ConnectionAttempts=10, as the"
                    " MPI operator passes) are ignored\n"
                    'while :; do\n  case "$1" in\n'
                    "    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;\n"
                    "    -?*) shift ;;\n"
                    "    *) break ;;\n  esac\ndone\n"
                    f'case "$1" in\n{cases}'
                    '  *) echo "ssh: Could not resolve hostname $1: no such simulated host" >&2;'
                    " exit 255 ;;\nesac\nshift\n"
                    + ("exec env -i HOME=/root LANG=C.UTF-8"
                       " PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "
                       if self.sshd_env else "exec ") +
                    'ip netns exec "$ns" unshare --uts sh -c \'hostname "$0"; exec sh -c "$1"\''
                    ' "$name" "$*"\n')
        os.chmod(self.rsh, 0o755)

    def _write_hosts_files(self) -> None:
        """/etc/netns/NAMESPACE/hosts, which `ip netns exec` mounts over /etc/hosts: every host
        by name (and NAME.DOMAIN), as a cluster's DNS would answer."""
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{a} {' '.join(reversed(names[1:]))}" for a, names in
                  zip(self.addresses, self.aliases)]
        os.makedirs("/etc/netns", exist_ok=True)
        for namespace in self.namespaces:
            folder = f"/etc/netns/{namespace}"
            os.makedirs(folder)  # new: _create checked that no namespace of this name exists
            self._etc.append(folder)
            with open(f"{folder}/hosts", "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")

    def _shape(self, namespace: str, dev: str) -> None:
        if self.delay:
            netem = ["delay", self.delay] + (["rate", self.rate] if self.rate else [])
            try:
                _tc(namespace, "qdisc", "add", "dev", dev, "root", "netem", *netem)
            except NetsimError as e:
                raise NetsimError(f"{e} (this kernel may lack sch_netem: run without a delay)")
        elif self.rate:
            # The bucket holds 1 ms at the link rate (at least 128 KiB, two 64 KiB GSO
            # packets): enough that fast links are not starved between timer ticks, little
            # enough that a 1 MiB transfer cannot pass at memory speed after a pause.
            burst = max(128 << 10, int(rate_bits(self.rate) / 8 / 1000))
            _tc(namespace, "qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate,
                "burst", str(burst), "latency", "100ms")

    def close(self) -> None:
        for namespace in reversed(self._made):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        self._made = []
        for folder in self._etc:
            shutil.rmtree(folder, ignore_errors=True)
        self._etc = []
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = ""

    def hosts_arg(self, slots: int, count: int | None = None) -> str:
        """-H's argument for the first COUNT hosts with SLOTS ranks each."""
        return ",".join(f"{a}:{slots}" for a in self.addresses[:count or self.size])

    def argv(self, host: int, command: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[host], "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', self.hostnames[host], *command]

    def environ(self) -> dict:
        return {"NETSIM_HOSTS": ",".join(self.addresses), "NETSIM_RSH": self.rsh,
                "NETSIM_NAMESPACES": ",".join(self.namespaces)}

    def run(self, host: int, command: list[str], **kwargs) -> subprocess.CompletedProcess:
        env = {**kwargs.pop("env", os.environ), **self.environ()}
        return subprocess.run(self.argv(host, command), env=env, **kwargs)

    def popen(self, host: int, command: list[str], **kwargs) -> subprocess.Popen:
        env = {**kwargs.pop("env", os.environ), **self.environ()}
        return subprocess.Popen(self.argv(host, command), env=env, **kwargs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, required=True, help="how many simulated hosts")
    parser.add_argument("--rate", help="link rate in both directions, tc's syntax (1gbit)")
    parser.add_argument("--delay", help="one-way delay per link end (needs sch_netem)")
    parser.add_argument("--congestion-control", help="every host's TCP congestion control "
                        "(default: the machine's)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="run in host 0")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("missing COMMAND")
    why = available()
    if why:
        print(f"netsim: {why}", file=sys.stderr)
        return 77
    try:
        with Cluster(args.hosts, args.rate, args.delay,
                     congestion=args.congestion_control) as cluster:
            print(f"netsim: {args.hosts} hosts {','.join(cluster.addresses)}"
                  f"{f' at {args.rate}' if args.rate else ''}; running: {shlex.join(command)}",
                  file=sys.stderr, flush=True)
            return cluster.run(0, command).returncode
    except (NetsimError, ValueError) as e:
        print(f"netsim: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
