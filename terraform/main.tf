# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
provider "aws" {
  region = var.region

  default_tags {
    tags = var.tags
  }
}

data "aws_availability_zones" "available" {
  #checkov:skip=CKV_AWS_394:only two zones are used (local.azs), whatever zones AWS adds later
  state = "available"

  filter {
    name   = "opt-in-status"
    values = ["opt-in-not-required"]
  }
}

# The zones that offer the GPU instance type.
data "aws_ec2_instance_type_offerings" "gpu" {
  location_type = "availability-zone"

  filter {
    name   = "instance-type"
    values = [var.gpu_instance_type]
  }
}

# The GPU instance type as EC2 describes it: its network cards, one EFA interface each.
data "aws_ec2_instance_type" "gpu" {
  instance_type = var.gpu_instance_type
}

# The CPU instance type's vCPUs and memory: Kueue's quota for the cpu pool (outputs.tf).
data "aws_ec2_instance_type" "cpu" {
  instance_type = var.cpu_instance_type
}

locals {
  # EKS wants subnets in two zones; the GPU nodes and FSx sit in the first one, beside each other
  # (EFA does not cross availability zones, and a placement group holds one zone).
  gpu_az = coalesce(var.gpu_availability_zone,
  try(sort(data.aws_ec2_instance_type_offerings.gpu.locations)[0], data.aws_availability_zones.available.names[0]))
  azs = [local.gpu_az, [for zone in data.aws_availability_zones.available.names : zone if zone != local.gpu_az][0]]

  # The cluster placement group of the GPU nodes (managed or Karpenter's): the one a capacity
  # reservation was made in (gpu_placement_group), none ("": a reservation outside any group, or
  # Capacity Blocks, which AWS places itself), or terraform's own (gpu.tf).
  gpu_placement_group = var.gpu_placement_group == null ? aws_placement_group.gpu_efa[0].name : (
  var.gpu_placement_group == "" ? null : var.gpu_placement_group)

  # Every network card of the GPU instance carries an EFA interface: the first also carries the
  # node's IP traffic (efa), the others EFA alone (efa-only, VPC CNI >= 1.18.4). As the eks
  # module's enable_efa_support writes them, which would also make a placement group of its own
  # and so put a capacity reservation's nodes outside the reservation's group.
  gpu_network_interfaces = [for i in range(data.aws_ec2_instance_type.gpu.maximum_network_cards) : {
    description                 = "EFA interface ${i}"
    device_index                = i == 0 ? 0 : 1
    network_card_index          = i
    interface_type              = i == 0 ? "efa" : "efa-only"
    associate_public_ip_address = false
    delete_on_termination       = true
  }]

  # Amazon Linux 2023 nodes: the Lustre client for FSx, installed before the node joins.
  lustre_client = [{
    content_type = "text/x-shellscript"
    content      = <<-EOT
      #!/bin/bash
      set -euo pipefail
      dnf install -y lustre-client
    EOT
  }]
}

check "gpu_zone_offers_the_instance_type" {
  assert {
    condition     = contains(data.aws_ec2_instance_type_offerings.gpu.locations, local.gpu_az)
    error_message = "${var.gpu_instance_type} is not offered in ${local.gpu_az}: set gpu_availability_zone to one of ${join(", ", sort(data.aws_ec2_instance_type_offerings.gpu.locations))}."
  }
}

module "vpc" {
  #checkov:skip=CKV_TF_1:a registry module pinned by version; its releases are what we review
  source  = "terraform-aws-modules/vpc/aws"
  version = "~> 6.6"

  name = var.cluster_name
  cidr = var.vpc_cidr
  azs  = local.azs
  # Large private subnets: every pod takes a VPC address (and p5 nodes 32 EFA interfaces).
  private_subnets = [for i in range(2) : cidrsubnet(var.vpc_cidr, 2, i)]
  public_subnets  = [for i in range(2) : cidrsubnet(var.vpc_cidr, 6, 48 + i)]

  enable_nat_gateway = true
  single_nat_gateway = true

  # karpenter.sh/discovery: where Karpenter launches nodes (k8s/karpenter/).
  public_subnet_tags  = { "kubernetes.io/role/elb" = 1 }
  private_subnet_tags = { "kubernetes.io/role/internal-elb" = 1, "karpenter.sh/discovery" = var.cluster_name }
}

module "eks" {
  #checkov:skip=CKV_TF_1:a registry module pinned by version; its releases are what we review
  source = "terraform-aws-modules/eks/aws"
  # 21.18 is the first whose karpenter submodule lets Karpenter read placement groups (the GPU
  # EC2NodeClass's placementGroupSelector); the same floor here, one module version.
  version = "~> 21.18"

  name               = var.cluster_name
  kubernetes_version = var.kubernetes_version

  endpoint_public_access       = true
  endpoint_public_access_cidrs = var.endpoint_public_cidrs
  # Whoever runs `terraform apply` administers the cluster (kubectl apply -k afterwards).
  enable_cluster_creator_admin_permissions = true

  vpc_id     = module.vpc.vpc_id
  subnet_ids = module.vpc.private_subnets

  # Between pods on different nodes the module lets through DNS and TCP 1025-65535 (libddp's and
  # Open MPI's listening sockets are ephemeral ports); mpirun in a launcher pod reaches its
  # workers' sshd on 22, which every node group must accept from the others (tests/deploy checks
  # the jobs' ports against these rules).
  node_security_group_additional_rules = {
    ingress_self_ssh = {
      description = "mpirun's ssh from MPIJob launchers to their workers"
      protocol    = "tcp"
      from_port   = 22
      to_port     = 22
      type        = "ingress"
      self        = true
    }
  }

  # The node security group, for Karpenter's nodes to find (k8s/karpenter/).
  node_security_group_tags = { "karpenter.sh/discovery" = var.cluster_name }

  addons = {
    coredns                = {}
    kube-proxy             = {}
    eks-pod-identity-agent = { before_compute = true }
    # EFA-only interfaces (enable_efa_only below) need VPC CNI 1.18.4 or later.
    vpc-cni = { before_compute = true, most_recent = true }
    # Node health conditions (GPU, kernel, network, storage) that node auto repair acts on
    # (node_repair_config below; Karpenter's nodeRepair gate, karpenter.tf).
    eks-node-monitoring-agent = {}
    # Container Insights with GPU (DCGM exporter) and EFA metrics: terraform/monitoring.tf.
    amazon-cloudwatch-observability = {
      pod_identity_association = [{
        role_arn        = aws_iam_role.cloudwatch_agent.arn
        service_account = "cloudwatch-agent"
      }]
    }
  }

  eks_managed_node_groups = {
    # Cluster add-ons, the device plugins' controllers, the MPI operator, and launchers.
    system = {
      ami_type       = "AL2023_x86_64_STANDARD"
      instance_types = ["m6i.large"]
      min_size       = 2
      max_size       = 3
      desired_size   = 2
      labels         = { "libddp/pool" = "system" }
      # An unhealthy node (NotReady, or a failed GPU, network or disk as the node monitoring
      # agent reports it) is replaced by EKS.
      node_repair_config = { enabled = true }
    }

    # The cpu overlay's workers (and, later, parameter servers).
    cpu = {
      ami_type              = "AL2023_x86_64_STANDARD"
      instance_types        = [var.cpu_instance_type]
      min_size              = 0
      max_size              = max(var.cpu_nodes, 1)
      desired_size          = var.karpenter ? 0 : var.cpu_nodes # Karpenter makes them instead
      labels                = { "libddp/pool" = "cpu" }
      cloudinit_pre_nodeadm = local.lustre_client
      node_repair_config    = { enabled = true }
    }

    # The gpu-efa overlay's workers: every EFA interface of the instance, the cluster placement
    # group of local.gpu_placement_group (the capacity reservation's, when there is one), one
    # availability zone, tainted so that only pods that ask for GPUs land there. A node that
    # fails (NotReady; a GPU, EFA or disk fault the monitoring agent reports) is replaced.
    gpu = {
      ami_type       = "AL2023_x86_64_NVIDIA"
      instance_types = [var.gpu_instance_type]
      min_size       = var.karpenter ? 0 : var.gpu_nodes # Karpenter makes them instead
      max_size       = var.gpu_nodes
      desired_size   = var.karpenter ? 0 : var.gpu_nodes
      subnet_ids     = [module.vpc.private_subnets[0]]

      network_interfaces = local.gpu_network_interfaces
      placement          = local.gpu_placement_group == null ? null : { group_name = local.gpu_placement_group }
      # EFA between the GPU nodes: all traffic within the group's own security group.
      security_group_ingress_rules = {
        all_self_efa = { description = "EFA from the other GPU nodes", ip_protocol = "-1", self = true }
      }
      security_group_egress_rules = {
        all_self_efa = { description = "EFA to the other GPU nodes", ip_protocol = "-1", self = true }
      }
      node_repair_config = { enabled = true }

      labels = {
        "libddp/pool"                   = "gpu-efa"
        "nvidia.com/gpu.present"        = "true" # the NVIDIA device plugin schedules on this
        "vpc.amazonaws.com/efa.present" = "true"
      }
      taints = {
        gpu = { key = "nvidia.com/gpu", value = "true", effect = "NO_SCHEDULE" }
      }

      # Room for images (the GPU image is ~15 GB) and datasets staged locally.
      block_device_mappings = {
        xvda = {
          device_name = "/dev/xvda"
          ebs = {
            volume_size           = 500
            volume_type           = "gp3"
            encrypted             = true
            delete_on_termination = true
          }
        }
      }
      cloudinit_pre_nodeadm = local.lustre_client

      capacity_reservation_specification = var.gpu_capacity_reservation_id == null ? null : {
        capacity_reservation_target = {
          capacity_reservation_id = var.gpu_capacity_reservation_id
        }
      }
    }
  }
}

# The image registry: `terraform output image_repository` is where k8s/README.md pushes to.
resource "aws_ecr_repository" "libddp" {
  name                 = var.cluster_name
  image_tag_mutability = "IMMUTABLE"
  force_delete         = true

  image_scanning_configuration {
    scan_on_push = true
  }

  encryption_configuration {
    encryption_type = "KMS"
  }
}
