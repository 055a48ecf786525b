# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun once per node: its own form (--nnodes K --node-rank I --rendezvous HOST:PORT -np N) and
torchrun's (--nnodes K --node-rank I --nproc-per-node L --master-addr A --master-port P, or
--standalone), mapped onto one; and where torch.distributed's own store is (MASTER_ADDR and
MASTER_PORT, which the ranks get beside ddprun's rendezvous, never the same port)."""
from __future__ import annotations

import argparse

from .procs import count_ranks

TORCHRUN_MASTER_PORT = 29500  # torchrun's --master-port when none is given


def _node_count(text: str) -> int | tuple[int, int]:
    """--nnodes: K (torchrun's K:K too), or torchrun's MIN:MAX with MIN < MAX (elastic mode:
    elastic_nodes), as (MIN, MAX)."""
    low, colon, high = text.partition(":")
    try:
        first, last = int(low), int(high) if colon else int(low)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of nodes (K, or MIN:MAX as torchrun takes it)") from None
    if first < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    if first > last:
        raise argparse.ArgumentTypeError(f"{text!r}: MIN is above MAX")
    return first if first == last else (first, last)


def elastic_nodes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """torchrun's --nnodes MIN:MAX, on the one ddprun that runs an elastic job: MIN x L to
    MAX x L workers (--min-np/--max-np; L: --nproc-per-node, default 1, also the slots of a host
    the discovery script lists without them)."""
    low, high = args.nnodes
    per_node = args.nproc_per_node or 1
    for flag, given in (("--min-np", args.min_np is not None),
                        ("--max-np", args.max_np is not None),
                        ("--node-rank", args.node_rank is not None),
                        ("--rendezvous", bool(args.rendezvous)),
                        ("--master-addr", args.master_addr is not None),
                        ("--master-port", args.master_port is not None),
                        ("--standalone", args.standalone)):
        if given:
            parser.error(f"--nnodes {low}:{high} is elastic mode, run from one ddprun for the "
                         f"whole job: it takes no {flag} (several hosts: -H/--hostfile or "
                         "--host-discovery-script)")
    if per_node < 1:
        parser.error(f"--nproc-per-node must be at least 1 (got {per_node})")
    args.min_np, args.max_np = low * per_node, high * per_node
    if args.slots is None and args.host_discovery_script:
        args.slots = per_node
    args.nnodes = args.nproc_per_node = None


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1..65535)")
    return int(text)


def add_node_flags(parser: argparse.ArgumentParser) -> None:
    nodes = parser.add_argument_group(
        "one ddprun per node (as torchrun; torchrun's flags are taken, underscores too)")
    nodes.add_argument("--nnodes", type=_node_count, metavar="K",
                       help="number of nodes in the job (torchrun's 'K:K' too); torchrun's "
                       "MIN:MAX is elastic mode from this one ddprun: --min-np MIN x L, "
                       "--max-np MAX x L (L: --nproc-per-node)")
    nodes.add_argument("--node-rank", "--node_rank", dest="node_rank", type=int, metavar="I",
                       help="this node's index, 0..K-1; node 0 hosts the rendezvous store")
    nodes.add_argument("--rendezvous", metavar="HOST:PORT",
                       help="node 0's address and the port its store listens on")
    nodes.add_argument("--token-file", metavar="FILE",
                       help="the job's secret, the same on every node (default: $DDP_JOB_TOKEN)")
    nodes.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node", type=int,
                       metavar="L", help="torchrun's: ranks per node (-np is K x L)")
    nodes.add_argument("--master-addr", "--master_addr", dest="master_addr", metavar="HOST",
                       help="torchrun's: node 0's address. With --nnodes K > 1, ddprun's store "
                       "listens there on --master-port + 1; the ranks get MASTER_ADDR=HOST")
    nodes.add_argument("--master-port", "--master_port", dest="master_port", type=_port,
                       metavar="PORT", help="torchrun's: the ranks' MASTER_PORT, for "
                       "torch.distributed's own store, which rank 0 hosts (default: "
                       f"{TORCHRUN_MASTER_PORT} with --master-addr, the port after --rendezvous's "
                       "with it, else a free port of this machine)")
    nodes.add_argument("--standalone", action="store_true",
                       help="torchrun's: one node, this machine, the store on a free port (what "
                       "ddprun does without --nnodes)")


def torchrun_flags(args: argparse.Namespace) -> list[str]:
    """The torchrun flags given that only a static job takes."""
    given = [("--nproc-per-node", args.nproc_per_node is not None),
             ("--master-addr", args.master_addr is not None),
             ("--master-port", args.master_port is not None), ("--standalone", args.standalone)]
    return [flag for flag, present in given if present]


def resolve_count(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """-np from torchrun's --nnodes x --nproc-per-node (--standalone alone: 1, as torchrun), or
    as given; given both ways, they must agree."""
    if args.standalone:
        _check_standalone(parser, args)
    if args.nproc_per_node is None:
        if args.np is None and args.standalone:
            args.np = 1
        if args.np is None:
            parser.error("-np N is required (the number of ranks), or torchrun's "
                         "--nproc-per-node L")
        return
    if args.nproc_per_node < 1:
        parser.error(f"--nproc-per-node must be at least 1 (got {args.nproc_per_node})")
    if args.hosts or args.hostfile:
        parser.error(f"--nproc-per-node is torchrun's count of ranks per node, with one ddprun "
                     f"per node; with {'-H' if args.hosts else '--hostfile'} give -np N (the "
                     "hosts' slots place them)")
    total = (args.nnodes or 1) * args.nproc_per_node
    if args.np is not None and args.np != total:
        parser.error(f"-np {args.np} and --nproc-per-node {args.nproc_per_node} disagree: "
                     f"--nnodes {args.nnodes or 1} x --nproc-per-node {args.nproc_per_node} is "
                     f"{count_ranks(total)}; give one of -np and --nproc-per-node")
    args.np = total


def _check_standalone(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    given = [("--nnodes", args.nnodes not in (None, 1)),
             ("--node-rank", args.node_rank not in (None, 0)),
             ("--rendezvous", bool(args.rendezvous)), ("--master-addr", bool(args.master_addr)),
             ("-H", bool(args.hosts)), ("--hostfile", bool(args.hostfile))]
    for flag, present in given:
        if present:
            parser.error(f"--standalone runs one node, this machine: it takes no {flag}")


def check_nodes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Once per node (args.nnodes K, args.rendezvous_host/_port, args.master_addr/_port set), or
    one launcher for the job (args.nnodes None; args.master_* as given, None: ddprun picks)."""
    if args.rendezvous:
        _ddprun_form(parser, args)
    elif args.nnodes is not None and args.nnodes > 1:
        _torchrun_form(parser, args)
    else:  # one node: ddprun's own launch from here; --nnodes 1 and --node-rank 0 say nothing
        if args.node_rank not in (None, 0):
            parser.error(f"--node-rank {args.node_rank} is not in 0..{(args.nnodes or 1) - 1}")
        args.nnodes = None
        return
    if args.hosts or args.hostfile:
        parser.error("--nnodes runs once per node: it takes no -H or --hostfile")
    if not 0 <= args.node_rank < args.nnodes:
        parser.error(f"--node-rank {args.node_rank} is not in 0..{args.nnodes - 1}")
    if args.np % args.nnodes:
        parser.error(f"-np {args.np} ranks do not split evenly over {args.nnodes} nodes")
    if args.master_port == args.rendezvous_port:
        parser.error(f"--master-port {args.master_port} is the rendezvous store's port: "
                     "torch.distributed's store needs another")


def _ddprun_form(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.nnodes is None or args.node_rank is None:
        parser.error("--nnodes, --node-rank and --rendezvous go together")
    host, colon, port = args.rendezvous.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        parser.error(f"--rendezvous {args.rendezvous!r} is not HOST:PORT")
    args.rendezvous_host, args.rendezvous_port = host.strip("[]"), int(port)
    args.master_addr = args.master_addr or args.rendezvous_host
    if args.master_port is None:
        if args.rendezvous_port == 65535:
            parser.error("--rendezvous HOST:65535 leaves no port after it for "
                         "torch.distributed's store (MASTER_PORT): give --master-port")
        args.master_port = args.rendezvous_port + 1


def _torchrun_form(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.master_addr:
        parser.error(f"--nnodes {args.nnodes} needs node 0's address: --master-addr HOST "
                     f"(--master-port, default {TORCHRUN_MASTER_PORT}), as torchrun takes it, or "
                     "--rendezvous HOST:PORT")
    if args.node_rank is None:
        parser.error(f"--nnodes {args.nnodes} needs --node-rank I, this node's index")
    if args.master_port is None:
        args.master_port = TORCHRUN_MASTER_PORT
    if args.master_port == 65535:
        parser.error("--master-port 65535 leaves no port after it for ddprun's store: give a "
                     "lower one, or --rendezvous HOST:PORT")
    args.rendezvous_host, args.rendezvous_port = args.master_addr, args.master_port + 1
