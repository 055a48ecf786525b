# FSx for Lustre beside the GPU nodes (same subnet): datasets and checkpoints, mounted in the
# pods through the FSx CSI driver by the static PersistentVolume in k8s/mpijob/overlays/gpu-efa.

resource "aws_security_group" "fsx" {
  name        = "${var.cluster_name}-fsx"
  description = "FSx for Lustre: Lustre traffic from the cluster's nodes"
  vpc_id      = module.vpc.vpc_id
}

# Lustre uses TCP 988 and 1018-1023: from the clients, between the file system's servers, and
# from the servers back to the clients. One rule per flow and port range.
locals {
  lustre_ports = { lnet = [988, 988], lustre = [1018, 1023] }
  lustre_flows = {
    fsx_from_nodes  = { ingress = true, on = aws_security_group.fsx.id, peer = module.eks.node_security_group_id, what = "from the EKS nodes" }
    fsx_from_itself = { ingress = true, on = aws_security_group.fsx.id, peer = aws_security_group.fsx.id, what = "between the file system's servers" }
    fsx_to_nodes    = { ingress = false, on = aws_security_group.fsx.id, peer = module.eks.node_security_group_id, what = "replies to the EKS nodes" }
    fsx_to_itself   = { ingress = false, on = aws_security_group.fsx.id, peer = aws_security_group.fsx.id, what = "between the file system's servers" }
    nodes_from_fsx  = { ingress = true, on = module.eks.node_security_group_id, peer = aws_security_group.fsx.id, what = "from FSx" }
  }
  lustre_rules = {
    for pair in setproduct(keys(local.lustre_flows), keys(local.lustre_ports)) :
    "${pair[0]}_${pair[1]}" => merge(local.lustre_flows[pair[0]], { port = pair[1], range = local.lustre_ports[pair[1]] })
  }
}

resource "aws_vpc_security_group_ingress_rule" "lustre" {
  for_each = { for name, rule in local.lustre_rules : name => rule if rule.ingress }

  security_group_id            = each.value.on
  description                  = "Lustre (${each.value.port}) ${each.value.what}"
  referenced_security_group_id = each.value.peer
  ip_protocol                  = "tcp"
  from_port                    = each.value.range[0]
  to_port                      = each.value.range[1]
}

resource "aws_vpc_security_group_egress_rule" "lustre" {
  for_each = { for name, rule in local.lustre_rules : name => rule if !rule.ingress }

  security_group_id            = each.value.on
  description                  = "Lustre (${each.value.port}) ${each.value.what}"
  referenced_security_group_id = each.value.peer
  ip_protocol                  = "tcp"
  from_port                    = each.value.range[0]
  to_port                      = each.value.range[1]
}

data "aws_caller_identity" "current" {}

# The account administers the key (AWS's default key policy, written out); FSx uses it through
# the grants it makes for the file system.
resource "aws_kms_key" "fsx" {
  description         = "${var.cluster_name} FSx for Lustre"
  enable_key_rotation = true
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "AccountAdministers"
      Effect    = "Allow"
      Principal = { AWS = "arn:aws:iam::${data.aws_caller_identity.current.account_id}:root" }
      Action    = "kms:*"
      Resource  = "*"
    }]
  })
}

resource "aws_fsx_lustre_file_system" "data" {
  storage_capacity            = var.fsx_storage_capacity_gib
  deployment_type             = "PERSISTENT_2"
  per_unit_storage_throughput = var.fsx_throughput_per_tib
  file_system_type_version    = "2.15"
  data_compression_type       = "LZ4"
  kms_key_id                  = aws_kms_key.fsx.arn
  subnet_ids                  = [module.vpc.private_subnets[0]]
  security_group_ids          = [aws_security_group.fsx.id]

  tags = { Name = "${var.cluster_name}-data" }
}
