#!/bin/sh
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# Entrypoint of the libddp images. In the MPI operator's launcher pod (K_MPI_JOB_ROLE=launcher),
# waits until every host of the hostfile resolves (the headless Service's DNS records can lag
# behind the pods being ready), naming the ones that do not, then runs the command. Elsewhere it
# runs the command at once.
set -eu
if [ "${K_MPI_JOB_ROLE:-}" = launcher ]; then
  hostfile="${OMPI_MCA_orte_default_hostfile:-/etc/mpi/hostfile}"
  wait_s="${DDP_DNS_WAIT_SECONDS:-120}"
  if [ -r "$hostfile" ]; then
    hosts=$(sed -e 's/#.*//' -e 's/[: ].*//' "$hostfile" | grep -v '^$' || true)
    waited=0
    for host in $hosts; do
      until getent hosts "$host" >/dev/null; do
        if [ "$waited" -ge "$wait_s" ]; then
          echo "ddp-entrypoint: $host (from $hostfile) does not resolve after ${wait_s}s" >&2
          exit 1
        fi
        sleep 1
        waited=$((waited + 1))
      done
    done
  fi
fi
exec "$@"
