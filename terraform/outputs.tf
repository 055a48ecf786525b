# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
output "configure_kubectl" {
  description = "Points kubectl at the new cluster."
  value       = "aws eks --region ${var.region} update-kubeconfig --name ${module.eks.cluster_name}"
}

output "cluster_name" {
  description = "Name of the EKS cluster."
  value       = module.eks.cluster_name
}

output "image_repository" {
  description = "ECR repository the images are pushed to (k8s/README.md)."
  value       = aws_ecr_repository.libddp.repository_url
}

output "fsx_id" {
  description = "FSx for Lustre file system id (the PersistentVolume's volumeHandle)."
  value       = aws_fsx_lustre_file_system.data.id
}

output "fsx_dns_name" {
  description = "FSx for Lustre DNS name."
  value       = aws_fsx_lustre_file_system.data.dns_name
}

output "fsx_mount_name" {
  description = "FSx for Lustre mount name."
  value       = aws_fsx_lustre_file_system.data.mount_name
}

output "fsx_env" {
  description = "The three FSx values as k8s/mpijob/overlays/gpu-efa/fsx.env takes them."
  value       = <<-EOT
    FSX_ID=${aws_fsx_lustre_file_system.data.id}
    FSX_DNS_NAME=${aws_fsx_lustre_file_system.data.dns_name}
    FSX_MOUNT_NAME=${aws_fsx_lustre_file_system.data.mount_name}
  EOT
}

output "karpenter_node_role" {
  description = "IAM role of the nodes Karpenter makes (k8s/karpenter/'s EC2NodeClasses: role)."
  value       = var.karpenter ? module.karpenter[0].node_iam_role_name : null
}

output "data_bucket" {
  description = "S3 bucket behind FSx: s3://BUCKET/data/ appears at /fsx/data, /fsx/checkpoints is exported to s3://BUCKET/checkpoints/ (make eks-stage-data fills data/)."
  value       = aws_s3_bucket.data.id
}

output "codebuild_project" {
  description = "CodeBuild project that builds and pushes the images where there is no Docker (k8s/eks.py, IMAGE_BUILDER=codebuild)."
  value       = aws_codebuild_project.images.name
}

output "region" {
  description = "AWS region of the stack (k8s/eks.py passes it to every aws command)."
  value       = var.region
}

output "gpu_placement_group" {
  description = "Placement group of the GPU nodes (k8s/karpenter/'s GPU EC2NodeClass selects it); null: none."
  value       = local.gpu_placement_group
}

output "kueue_quotas" {
  description = "What each pool's nodes hold for pods, as Kueue's ClusterQueues take it (k8s/kueue/, sized by k8s/local_overlay.py --kueue): with Karpenter, its NodePools' limits."
  value = {
    cpu = var.karpenter ? { cpu = 120, memory = "460Gi" } : {
      cpu    = var.cpu_nodes * (data.aws_ec2_instance_type.cpu.default_vcpus - 2)
      memory = "${floor(var.cpu_nodes * data.aws_ec2_instance_type.cpu.memory_size * 0.82)}Mi"
    }
    gpu = {
      cpu                     = var.gpu_nodes * 190
      memory                  = "${var.gpu_nodes * 1900}Gi"
      "nvidia.com/gpu"        = var.gpu_nodes * 8
      "vpc.amazonaws.com/efa" = var.gpu_nodes * 32
    }
  }
}
