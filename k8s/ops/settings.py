# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What the user asked k8s/eks.py for (VERB and NAME=VALUE words, or the same names in the
environment), checked before anything runs: an unknown job or overlay, a job that is not in its
overlay, a region that is not one, a timeout that is not a number, each a Failure that says what
would be right."""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping

from ops.shell import Failure

# The jobs of each overlay; `all` sends every job of an MPIJob overlay to its queue at once.
OVERLAY_JOBS = {"cpu": ("ddp-digits", "ddp-synthetic", "ddp-bench"),
                "gpu-efa": ("ddp-digits", "ddp-synthetic", "ddp-bench"),
                "ps": ("ddp-ps",), "trainjob": ("ddp-torch-digits",)}
VERBS = ("up", "run", "stage-data", "down")
REGION = re.compile(r"[a-z]{2}(-gov)?-[a-z]+-[0-9]")


@dataclasses.dataclass
class Settings:
    verb: str
    job: str = ""
    overlay: str = ""
    timeout_s: int = 3600
    region: str | None = None  # asked for (REGION=, or -var region= in TF_VARS); else terraform's
    tf_args: list[str] = dataclasses.field(default_factory=list)
    delete_checkpoints: bool = False
    save_checkpoints: str | None = None

    @property
    def jobs(self) -> tuple[str, ...]:
        return OVERLAY_JOBS[self.overlay] if self.job == "all" else (self.job,)


def _overlay_for(job: str) -> str:
    return {"ddp-ps": "ps", "ddp-torch-digits": "trainjob"}.get(job, "gpu-efa")


def parse(argv: list[str], environ: Mapping[str, str] | None = None) -> Settings:
    env: Mapping[str, str] = os.environ if environ is None else environ
    if not argv or argv[0] not in VERBS:
        raise Failure(f"say what to do: {' | '.join(VERBS)} (k8s/eks.py's docstring, or "
                      "k8s/README.md, 'On a cluster')")
    words = [a for a in argv[1:] if "=" not in a]
    if words:
        raise Failure(f"{' '.join(words)}: give settings as NAME=VALUE (JOB=ddp-digits)")
    given = dict(a.split("=", 1) for a in argv[1:])

    def get(name: str, default: str = "") -> str:
        return given.get(name) or env.get(name) or default

    # terraform's arguments, split at white space and passed on as they are (no shell: the
    # quotes of -var endpoint_public_cidrs=["203.0.113.7/32"] are terraform's).
    tf_args = get("TF_VARS").split()
    asked = next((w.split("=", 2)[-1] for w in tf_args
                  if w.startswith(("region=", "-var=region="))), None)
    region = get("REGION") or asked
    if region is not None and not REGION.fullmatch(region):
        raise Failure(f"REGION={region}: not an AWS region name (such as us-west-2)")
    if region and asked and asked != region:
        raise Failure(f"REGION={region} but TF_VARS says region={asked}: say one")
    timeout = get("TIMEOUT", "3600")
    if not timeout.isdigit() or int(timeout) == 0:
        raise Failure(f"TIMEOUT={timeout}: a whole number of seconds, such as 3600")
    settings = Settings(argv[0], timeout_s=int(timeout), region=region, tf_args=tf_args,
                        delete_checkpoints=get("DELETE_CHECKPOINTS", "0") not in ("", "0"),
                        save_checkpoints=get("SAVE_CHECKPOINTS") or None)
    if settings.verb == "run":
        settings.job, settings.overlay = _job_and_overlay(get("JOB"), get("OVERLAY"))
    return settings


def _job_and_overlay(job: str, overlay: str) -> tuple[str, str]:
    every = sorted({j for jobs in OVERLAY_JOBS.values() for j in jobs} | {"all"})
    if not job:
        raise Failure(f"run needs JOB=: one of {', '.join(every)}")
    if job not in every:
        raise Failure(f"JOB={job}: no such job; one of {', '.join(every)}")
    overlay = overlay or _overlay_for(job)
    if overlay not in OVERLAY_JOBS:
        raise Failure(f"OVERLAY={overlay}: no such overlay; one of {', '.join(OVERLAY_JOBS)}")
    if job == "all":
        if overlay not in ("cpu", "gpu-efa"):
            raise Failure(f"JOB=all sends an MPIJob overlay's jobs together: OVERLAY=cpu or "
                          f"gpu-efa, not {overlay}")
    elif job not in OVERLAY_JOBS[overlay]:
        homes = [name for name, jobs in OVERLAY_JOBS.items() if job in jobs]
        raise Failure(f"JOB={job} is not in OVERLAY={overlay} (it has "
                      f"{', '.join(OVERLAY_JOBS[overlay])}); {job} runs with OVERLAY="
                      f"{' or '.join(homes)}")
    return job, overlay
