# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun's ranks' environments: what each rank is told (DDP_* and horovodrun's names), what of
the launcher's environment it keeps, and what it runs."""
from __future__ import annotations

import argparse
import os
import pathlib
import sys

from .hosts import Place

# Inherited variables that would tell a rank it belongs to some other job.
_SCRUBBED_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "DDP_LOCAL_", "DDP_CROSS_", "DDP_RENDEZVOUS_",
                      "TORCHELASTIC_")
# Horovod's names for a rank's place (what horovodrun sets), set again for this job: scripts
# written for Horovod read them (the local rank picks the GPU before init()).
HOROVOD_PLACE = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                 "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE")
# torchrun's names for a rank's place (torch.distributed's env:// reads RANK, WORLD_SIZE,
# MASTER_ADDR and MASTER_PORT; scripts read LOCAL_RANK), set again for this job. torchrun's
# agent's own (TORCHELASTIC_*: its store, its restarts) are never set: there is no such agent.
TORCHRUN_PLACE = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                  "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME")
_TORCHRUN_NAMES = (*TORCHRUN_PLACE, "MASTER_ADDR", "MASTER_PORT")
_SCRUBBED_NAMES = {"DDP_RANK", "DDP_SIZE", "DDP_JOB_TOKEN", "DDP_REJOIN", "DDP_REPORT_FD",
                   "DDP_MONITOR",
                   "MPI_LOCALRANKID", "MPI_LOCALNRANKS", *HOROVOD_PLACE, *_TORCHRUN_NAMES}
# What the ranks of an elastic job are not told by the launcher: they learn their place from
# each generation (ddp/elastic.py).
ELASTIC_UNSET = ("DDP_RANK", "DDP_SIZE", "DDP_LOCAL_RANK", "DDP_LOCAL_SIZE", "DDP_CROSS_RANK",
                 "DDP_CROSS_SIZE", "DDP_RENDEZVOUS_PORT", "DDP_TIMELINE", *HOROVOD_PLACE,
                 *_TORCHRUN_NAMES)

# Variables of the launcher's session that say nothing about the job; every other one goes to
# the ranks on other hosts too (as horovodrun does), so that PATH, a virtual environment,
# PYTHONPATH and the user's DDP_* settings hold there as here.
_LOCAL_ONLY_NAMES = {"HOSTNAME", "HOST", "PWD", "OLDPWD", "SHLVL", "_", "DISPLAY", "XAUTHORITY",
                     "TERM", "TERMCAP", "COLUMNS", "LINES"}
_LOCAL_ONLY_PREFIXES = ("SSH_", "BASH_FUNC_", "XDG_")


def decimal(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def server_command() -> list[str]:
    """What a parameter-server rank runs."""
    return [sys.executable, "-m", "ddp.ps.server"]


def scrubbed(base) -> dict:
    """BASE less the variables that would place a process in some other job."""
    return {k: v for k, v in base.items()
            if k not in _SCRUBBED_NAMES and not k.startswith(_SCRUBBED_PREFIXES)}


def forwarded_env() -> dict:
    """The launcher's environment as the ranks on other hosts get it."""
    return {k: v for k, v in os.environ.items()
            if k not in _LOCAL_ONLY_NAMES and not k.startswith(_LOCAL_ONLY_PREFIXES)}


def _settings(env: dict, args: argparse.Namespace) -> None:
    """The job's settings from ddprun's flags, the same for every rank."""
    if args.servers:
        env["DDP_PS_SERVERS"] = str(args.servers)
    if args.restart_servers:
        env["DDP_TRANSPORT"] = "tcp"
        env.setdefault("DDP_PS_SERVER_RESTART_SECONDS", "120")
    if args.fusion_threshold_mb is not None:
        env["DDP_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1048576))
    if args.cycle_time_ms is not None:
        env["DDP_CYCLE_TIME_MS"] = decimal(args.cycle_time_ms)
    if args.autotune:
        env["DDP_AUTOTUNE"] = "1"
    if args.start_timeout is not None:
        env["DDP_START_TIMEOUT_SECONDS"] = decimal(args.start_timeout)
    if args.log_level is not None:
        env["DDP_LOG_LEVEL"] = args.log_level
    if args.iface is not None:  # NCCL's own sockets too, as horovodrun's --network-interfaces
        env["DDP_IFACE"] = env["NCCL_SOCKET_IFNAME"] = args.iface
    if args.flight_recorder is not None:
        env["DDP_FLIGHT_RECORDER_DUMP"] = os.path.abspath(args.flight_recorder)


def _timeline(env: dict, args: argparse.Namespace, rank: int) -> None:
    if args.job_timeline is not None:  # every rank its file, and the clocks measured at start
        env["DDP_TIMELINE"] = str(job_timeline_folder(args) / f"rank.{rank}.json")
        env["DDP_TIMELINE_CLOCK_SYNC"] = "1"
        return
    timeline = args.timeline_filename
    if timeline and "{rank}" in timeline:
        env["DDP_TIMELINE"] = timeline.replace("{rank}", str(rank))
    elif timeline:
        if rank == 0:
            env["DDP_TIMELINE"] = timeline
        else:  # an inherited one would have every rank write rank 0's file
            env.pop("DDP_TIMELINE", None)


def job_timeline_folder(args: argparse.Namespace) -> pathlib.Path:
    """Where the ranks write their timelines for --job-timeline FILE: FILE.ranks/."""
    path = pathlib.Path(os.path.abspath(args.job_timeline))
    return path.with_name(path.name + ".ranks")


def _group(args: argparse.Namespace, where: Place) -> tuple[int, int]:
    """torchrun's GROUP_RANK and GROUP_WORLD_SIZE: the index of the rank's node (host) among the
    job's, and how many there are. Horovod's cross rank differs where hosts have unequal slots."""
    if not args.places:  # one machine (0 of 1), or once per node (its node rank of K)
        return where.cross_rank, where.cross_size
    hosts = list(dict.fromkeys(p.host for p in args.places))
    return hosts.index(where.host), len(hosts)


def _torchrun(env: dict, rank: int, args: argparse.Namespace, where: Place,
              master: tuple[str, int]) -> None:
    """torchrun's variables, from the same place as the DDP_* ones (one role, "default")."""
    group, groups = _group(args, where)
    env.update(zip(TORCHRUN_PLACE, (str(rank), str(args.np), str(where.local_rank),
                                    str(where.local_size), str(group), str(groups), str(rank),
                                    str(args.np), "default")))
    env.update(MASTER_ADDR=master[0], MASTER_PORT=str(master[1]))


def rank_env(base, rank: int, args: argparse.Namespace, addr: str, port: int, token: str,
             where: Place | None = None, master: tuple[str, int] | None = None) -> dict:
    """The environment of one rank: the launcher's, less other jobs' ranks, plus this job's.
    MASTER: torch.distributed's store, (MASTER_ADDR, MASTER_PORT); with it the rank gets
    torchrun's variables too."""
    env = scrubbed(base)
    where = where or Place("", rank, args.np, 0, 1)
    env.update(DDP_RANK=str(rank), DDP_SIZE=str(args.np), DDP_LOCAL_RANK=str(where.local_rank),
               DDP_LOCAL_SIZE=str(where.local_size), DDP_CROSS_RANK=str(where.cross_rank),
               DDP_CROSS_SIZE=str(where.cross_size), DDP_RENDEZVOUS_ADDR=addr,
               DDP_RENDEZVOUS_PORT=str(port), DDP_RENDEZVOUS_EXTERNAL="1", DDP_JOB_TOKEN=token,
               PYTHONUNBUFFERED="1")
    if getattr(args, "monitor", True):  # ddprun's own jobs: its store hears the ranks
        env["DDP_MONITOR"] = "1"
    env.update(zip(HOROVOD_PLACE, (env["DDP_RANK"], env["DDP_SIZE"], env["DDP_LOCAL_RANK"],
                                   env["DDP_LOCAL_SIZE"], env["DDP_CROSS_RANK"],
                                   env["DDP_CROSS_SIZE"])))
    if where.host and args.places:  # the host as the launcher knows it: what libddp groups by
        env["DDP_HOSTNAME"] = where.host
    if master is not None:
        _torchrun(env, rank, args, where, master)
    _settings(env, args)
    _timeline(env, args, rank)
    return env


def worker_env(base, args: argparse.Namespace, addr: str, token: str) -> dict:
    """The environment of an elastic worker before the driver says where it meets: the job's
    settings, and no place (each generation gives it one)."""
    env = rank_env(base, 0, args, addr, 0, token)
    for name in ELASTIC_UNSET:
        env.pop(name, None)
    return env
