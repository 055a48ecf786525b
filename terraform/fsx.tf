# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
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

# The data's home in S3, linked to the file system by two data repository associations: /data
# imports from s3://BUCKET/data (the training data, staged by `make eks-stage-data`; new and
# changed objects appear on FSx as they land), /checkpoints exports to s3://BUCKET/checkpoints
# (what the jobs write there reaches S3 and outlives the file system).
resource "aws_s3_bucket" "data" {
  #checkov:skip=CKV_AWS_18:access logging would need a second bucket; this holds a demo's data and checkpoints
  #checkov:skip=CKV_AWS_144:cross-region replication is not wanted for re-creatable training data
  #checkov:skip=CKV2_AWS_62:nothing consumes event notifications; FSx imports through its association
  #checkov:skip=CKV_AWS_145:SSE-S3 (AES256): FSx's service-linked role reads it without a key grant
  bucket_prefix = "${var.cluster_name}-data-"
  force_destroy = true # terraform destroy removes the data with the file system (README)
}

resource "aws_s3_bucket_public_access_block" "data" {
  bucket                  = aws_s3_bucket.data.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "data" {
  bucket = aws_s3_bucket.data.id
  versioning_configuration {
    status = "Enabled" # an overwritten checkpoint can be recovered
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "data" {
  bucket = aws_s3_bucket.data.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "data" {
  bucket = aws_s3_bucket.data.id
  rule {
    id     = "old-versions-and-uploads"
    status = "Enabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = 30
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
  }
}

resource "aws_fsx_data_repository_association" "data" {
  file_system_id                   = aws_fsx_lustre_file_system.data.id
  file_system_path                 = "/data"
  data_repository_path             = "s3://${aws_s3_bucket.data.id}/data/"
  batch_import_meta_data_on_create = true

  s3 {
    auto_import_policy {
      events = ["NEW", "CHANGED", "DELETED"]
    }
  }
}

resource "aws_fsx_data_repository_association" "checkpoints" {
  file_system_id       = aws_fsx_lustre_file_system.data.id
  file_system_path     = "/checkpoints"
  data_repository_path = "s3://${aws_s3_bucket.data.id}/checkpoints/"

  s3 {
    auto_export_policy {
      events = ["NEW", "CHANGED", "DELETED"]
    }
  }
}
