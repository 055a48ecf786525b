# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun: runs N ranks of a command as one libddp job, on this machine or on several hosts.

    ddprun -np 4 python train.py                         (or: python -m ddp.run ...)
    ddprun -np 8 -H host1:4,host2:4 python train.py      (-hostfile FILE: "host slots=N" lines)
    ddprun --nnodes 2 --node-rank 0 --rendezvous HOST:PORT -np 8 python train.py   (per node)
    ddprun --nnodes 2 --node-rank 0 --nproc-per-node 4 --master-addr HOST python train.py
                                                         (per node, in torchrun's words)
    ddprun -np 4 --servers 2 python train_ps.py          (parameter server: 2 more ranks serve)
    ddprun -np 2 --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh python train.py
                                                         (elastic: ddp.elastic, ddp.torch.elastic)

The launcher hosts the store the ranks meet at, gives each rank its DDP_* environment (and
horovodrun's HOROVOD_* and torchrun's RANK, WORLD_SIZE, LOCAL_RANK, ..., MASTER_ADDR/PORT names
for the same place), copies their output line by line with "[rank] " (several hosts:
"[host:rank] ") in front, and, when one rank fails, stops the others so that a job never hangs
on a dead peer. Its exit status is the first failing rank's. On other hosts it starts one agent
per host over ssh (or --rsh CMD): this package's __main__.py run with --_agent, which reads the
job (token included) from its standard input, so that no secret is ever on a command line, and
stops its ranks when that input closes. horovodrun's flags (-p, -i, -hostfile,
--output-filename, --prefix-output-with-timestamp, --network-interfaces, --log-level,
--version) and torchrun's (--nproc-per-node, --nnodes, --node-rank, --master-addr,
--master-port, --standalone) mean what they mean there; docs/launching.md says how.

The rooms: cli (the entry point), args (the command line), nodes (per-node launches, torchrun's
form), hosts (-H, hostfiles, placement), env (each rank's environment), output (lines, prefixes,
sinks, the per-rank files), job (the supervisor), static_job (a static job's store and units),
agent (a host's part), elastic_driver and discovery (elastic mode), procs (exit statuses,
/dev/shm).
"""
from .cli import main
from .hosts import Host, Place, is_local, parse_hostfile, parse_hosts, place
from .procs import sweep_shm
