# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# Where the GPU nodes go: a cluster placement group (EFA's latency wants one), shared by the
# managed gpu node group (main.tf) and Karpenter's GPU nodes (k8s/karpenter/, through the
# gpu_placement_group output). A capacity reservation is made in a placement group or in none,
# and its instances must launch there: with gpu_capacity_reservation_id, gpu_placement_group
# names that group ("" for none) and terraform makes none of its own.

resource "aws_placement_group" "gpu_efa" {
  count    = var.gpu_placement_group == null ? 1 : 0
  name     = "${var.cluster_name}-gpu-efa"
  strategy = "cluster"
}
