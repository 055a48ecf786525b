# FSx for Lustre beside the GPU nodes (same subnet): datasets and checkpoints, mounted in the
# pods through the FSx CSI driver by the static PersistentVolume in k8s/mpijob/overlays/gpu-efa.

resource "aws_security_group" "fsx" {
  name        = "${var.cluster_name}-fsx"
  description = "FSx for Lustre: Lustre traffic from the cluster's nodes"
  vpc_id      = module.vpc.vpc_id
}

# Lustre uses TCP 988 and 1018-1023, from the clients and between the file system's servers.
locals {
  lustre_ports = { lnet = [988, 988], lustre = [1018, 1023] }
}

resource "aws_vpc_security_group_ingress_rule" "fsx_from_nodes" {
  for_each = local.lustre_ports

  security_group_id            = aws_security_group.fsx.id
  description                  = "Lustre (${each.key}) from the EKS nodes"
  referenced_security_group_id = module.eks.node_security_group_id
  ip_protocol                  = "tcp"
  from_port                    = each.value[0]
  to_port                      = each.value[1]
}

resource "aws_vpc_security_group_ingress_rule" "fsx_from_itself" {
  for_each = local.lustre_ports

  security_group_id            = aws_security_group.fsx.id
  description                  = "Lustre (${each.key}) between the file system's servers"
  referenced_security_group_id = aws_security_group.fsx.id
  ip_protocol                  = "tcp"
  from_port                    = each.value[0]
  to_port                      = each.value[1]
}

resource "aws_vpc_security_group_egress_rule" "fsx_to_nodes" {
  for_each = local.lustre_ports

  security_group_id            = aws_security_group.fsx.id
  description                  = "Lustre (${each.key}) replies to the EKS nodes"
  referenced_security_group_id = module.eks.node_security_group_id
  ip_protocol                  = "tcp"
  from_port                    = each.value[0]
  to_port                      = each.value[1]
}

resource "aws_vpc_security_group_egress_rule" "fsx_to_itself" {
  for_each = local.lustre_ports

  security_group_id            = aws_security_group.fsx.id
  description                  = "Lustre (${each.key}) between the file system's servers"
  referenced_security_group_id = aws_security_group.fsx.id
  ip_protocol                  = "tcp"
  from_port                    = each.value[0]
  to_port                      = each.value[1]
}

# The clients' side: the servers connect back to the nodes on the same ports.
resource "aws_vpc_security_group_ingress_rule" "nodes_from_fsx" {
  for_each = local.lustre_ports

  security_group_id            = module.eks.node_security_group_id
  description                  = "Lustre (${each.key}) from FSx"
  referenced_security_group_id = aws_security_group.fsx.id
  ip_protocol                  = "tcp"
  from_port                    = each.value[0]
  to_port                      = each.value[1]
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
