# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# Karpenter (karpenter = true): its IAM roles, interruption queue and pod identity from the EKS
# module's karpenter submodule, the controller from its Helm chart on the system nodes, and the
# EFA security group the GPU+EFA EC2NodeClass names (its placement group is gpu.tf's, shared
# with the managed gpu node group). The NodePools and EC2NodeClasses are
# k8s/karpenter/ (kubectl apply -k k8s/karpenter once this is up). With Karpenter on, the managed
# cpu and gpu node groups start empty (main.tf): Karpenter makes those nodes when pods wait.

module "karpenter" {
  #checkov:skip=CKV_TF_1:a registry module pinned by version; its releases are what we review
  source = "terraform-aws-modules/eks/aws//modules/karpenter"
  # 21.18: the controller's policy lets it read placement groups (placementGroupSelector).
  version = "~> 21.18"
  count   = var.karpenter ? 1 : 0

  cluster_name = module.eks.cluster_name
  # A fixed name: k8s/karpenter/'s EC2NodeClasses name this role.
  node_iam_role_use_name_prefix = false
  node_iam_role_name            = "${var.cluster_name}-karpenter-node"
  node_iam_role_additional_policies = {
    AmazonSSMManagedInstanceCore = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
  }
}

resource "helm_release" "karpenter" {
  count      = var.karpenter ? 1 : 0
  name       = "karpenter"
  namespace  = "kube-system"
  repository = var.karpenter_chart_repository
  chart      = "karpenter"
  version    = var.karpenter_version
  # The chart's CRDs are the ones tests/deploy validates k8s/karpenter/ against (v1).
  values = [yamlencode({
    settings = {
      clusterName       = module.eks.cluster_name
      interruptionQueue = module.karpenter[0].queue_name
      featureGates = {
        # capacity reservations and Capacity Blocks (karpenter.sh/capacity-type: reserved)
        reservedCapacity = true
        # a node whose conditions stay unhealthy (NotReady 30 min, a GPU fault 10 min: the
        # node monitoring agent, main.tf's add-on) is replaced
        nodeRepair = true
      }
    }
    serviceAccount = { name = module.karpenter[0].service_account }
    nodeSelector   = { "libddp/pool" = "system" } # never on the nodes it manages
    tolerations    = [{ key = "CriticalAddonsOnly", operator = "Exists" }]
  })]

  lifecycle {
    precondition {
      condition     = var.karpenter_chart_repository != null
      error_message = "karpenter = true needs karpenter_chart_repository (Karpenter's install guide names it)."
    }
  }

  depends_on = [module.eks]
}

# EFA traffic between GPU nodes needs a security group open to itself (all protocols); the
# managed gpu node group gets one from the EKS module, Karpenter's GPU nodes get this one
# (k8s/karpenter/ec2nodeclass-gpu-efa.yaml selects it by its tag).
resource "aws_security_group" "efa" {
  #checkov:skip=CKV2_AWS_5:attached by Karpenter to the GPU nodes it launches (EC2NodeClass gpu-efa), not by terraform
  count       = var.karpenter ? 1 : 0
  name        = "${var.cluster_name}-efa"
  description = "EFA between the GPU nodes Karpenter makes"
  vpc_id      = module.vpc.vpc_id
  tags        = { "libddp/efa" = var.cluster_name }
}

resource "aws_vpc_security_group_ingress_rule" "efa_self" {
  count                        = var.karpenter ? 1 : 0
  security_group_id            = aws_security_group.efa[0].id
  description                  = "EFA from the other GPU nodes"
  referenced_security_group_id = aws_security_group.efa[0].id
  ip_protocol                  = "-1"
}

resource "aws_vpc_security_group_egress_rule" "efa_self" {
  count                        = var.karpenter ? 1 : 0
  security_group_id            = aws_security_group.efa[0].id
  description                  = "EFA to the other GPU nodes"
  referenced_security_group_id = aws_security_group.efa[0].id
  ip_protocol                  = "-1"
}
