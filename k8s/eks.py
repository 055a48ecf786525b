#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""One command each for a libddp cluster on EKS (the Makefile's eks-* targets call this):

    python3 k8s/eks.py up [REGION=us-west-2] [TF_VARS=...]
        terraform apply (EKS, node groups, FSx, Karpenter if asked, the MPI operator, Kubeflow
        Trainer with JobSet, Kueue); its outputs to k8s/local/; Kueue's queues sized for it
    python3 k8s/eks.py run JOB=ddp-digits|ddp-synthetic|ddp-bench|all [OVERLAY=gpu-efa|cpu]
                           (or JOB=ddp-ps [OVERLAY=ps], JOB=ddp-torch-digits [OVERLAY=trainjob])
        the image built and pushed unless that tag is there already (docker buildx; without
        it, or with IMAGE_BUILDER=codebuild, terraform's CodeBuild project from a zip of the
        commit); a local overlay with that job alone (JOB=all: the overlay's jobs, sent
        together: Kueue runs them as the pool allows); checked offline and by the cluster;
        applied; waited for; accuracy, busbw and the EFA verification printed
    python3 k8s/eks.py stage-data                 the training data to s3://BUCKET/data/ (FSx /data)
    python3 k8s/eks.py down [SAVE_CHECKPOINTS=DIR | DELETE_CHECKPOINTS=1]
        the jobs deleted, Karpenter's nodes waited for, terraform destroy; refused while the
        bucket holds exported checkpoints, unless they are saved or let go

Every step says what it does and how long it took. It acts only on terraform's cluster, through
a kubeconfig of its own (k8s/local/kubeconfig), never the current kube context. DRY_RUN=1 runs
what can run offline (render, validate, and with REHEARSE=1 the job rehearsed in network
namespaces) and prints the commands it would run. TF_VARS passes terraform its -var flags
(e.g. TF_VARS='-var endpoint_public_cidrs=["203.0.113.7/32"]'). A mistake (an unknown job, a
missing tool, refused credentials, a wrong region) is one line saying what to do, found before
anything is changed. Nothing tracked is written: terraform's outputs, the local overlays, the
logs and the staged data all go under k8s/local/ (git-ignored). EKS_DEBUG=1 shows a traceback
where there would be one.
"""
from __future__ import annotations

import os
import sys
import time

from ops import jobs, stack
from ops.outputs import Outputs
from ops.settings import parse
from ops.shell import DRY_RUN, Failure


def main(argv: list[str]) -> int:
    start = time.monotonic()
    try:
        settings = parse(argv)
        if DRY_RUN:
            print("DRY_RUN=1: offline steps run, the others are printed", flush=True)
        status = 0
        if settings.verb == "up":
            stack.up(settings)
        elif settings.verb == "run":
            status = jobs.run(Outputs.load(), settings)
        elif settings.verb == "stage-data":
            stack.stage_data()
        else:
            stack.down(settings)
    except Failure as failure:
        print(f"eks.py: {failure}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("eks.py: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as e:  # a bug of eks.py: one line, the traceback on request
        if os.environ.get("EKS_DEBUG") == "1":
            raise
        print(f"eks.py: unexpected {type(e).__name__}: {e} (EKS_DEBUG=1 shows where)",
              file=sys.stderr, flush=True)
        return 1
    print(f"eks.py {settings.verb}: {'done' if status == 0 else 'FAILED'} in "
          f"{time.monotonic() - start:.1f} s", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
