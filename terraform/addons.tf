# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# What the jobs need in the cluster: the NVIDIA and EFA device plugins (so that pods can ask for
# nvidia.com/gpu and vpc.amazonaws.com/efa), the FSx CSI driver, the MPI operator (MPIJobs),
# Kubeflow Trainer with JobSet (TrainJobs), and Kueue, which admits every job whole.

provider "helm" {
  kubernetes = {
    host                   = module.eks.cluster_endpoint
    cluster_ca_certificate = base64decode(module.eks.cluster_certificate_authority_data)
    exec = {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "aws"
      args        = ["eks", "get-token", "--cluster-name", module.eks.cluster_name, "--region", var.region]
    }
  }
}

locals {
  gpu_toleration = { key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }
}

resource "helm_release" "nvidia_device_plugin" {
  name       = "nvidia-device-plugin"
  repository = "https://nvidia.github.io/k8s-device-plugin"
  chart      = "nvidia-device-plugin"
  version    = "0.20.0"
  namespace  = "kube-system"
  # The chart tolerates the GPU taint and runs where nvidia.com/gpu.present=true (main.tf).

  depends_on = [module.eks]
}

resource "helm_release" "efa_device_plugin" {
  name       = "aws-efa-k8s-device-plugin"
  repository = "https://aws.github.io/eks-charts"
  chart      = "aws-efa-k8s-device-plugin"
  version    = "v0.5.30"
  namespace  = "kube-system"
  values = [yamlencode({
    tolerations  = [local.gpu_toleration]
    nodeSelector = { "vpc.amazonaws.com/efa.present" = "true" }
  })]

  depends_on = [module.eks]
}

resource "helm_release" "fsx_csi_driver" {
  name       = "aws-fsx-csi-driver"
  repository = "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"
  chart      = "aws-fsx-csi-driver"
  version    = "1.17.0"
  namespace  = "kube-system"
  # Static volumes only (the file system is made above): the controller needs no AWS access.
  set = [{ name = "node.tolerateAllTaints", value = "true" }]

  depends_on = [module.eks]
}

locals {
  # The start of every install below: a kubeconfig of its own for this cluster (never the
  # caller's current context), and `k` for kubectl with it. Runs where `terraform apply` runs:
  # needs aws and kubectl.
  with_cluster = <<-EOT
    set -eu
    kubeconfig=$(mktemp)
    trap 'rm -f "$kubeconfig"' EXIT
    aws eks update-kubeconfig --region "$REGION" --name "$CLUSTER" --kubeconfig "$kubeconfig" >/dev/null
    k() { kubectl --kubeconfig "$kubeconfig" "$@"; }
  EOT
  cluster_env  = { REGION = var.region, CLUSTER = module.eks.cluster_name }
}

# The Kubeflow MPI operator: its release manifests, applied server-side (its CRD is too large
# for a client-side apply's annotation).
resource "terraform_data" "mpi_operator" {
  triggers_replace = [var.mpi_operator_version, module.eks.cluster_name]

  provisioner "local-exec" {
    command     = <<-EOT
      ${local.with_cluster}
      k apply --server-side -f \
        "https://raw.githubusercontent.com/kubeflow/mpi-operator/$VERSION/deploy/v2beta1/mpi-operator.yaml"
      k -n mpi-operator rollout status deployment/mpi-operator --timeout=300s
    EOT
    environment = merge(local.cluster_env, { VERSION = var.mpi_operator_version })
    interpreter = ["/bin/bash", "-c"]
  }

  depends_on = [module.eks]
}

# Kubeflow Trainer v2 and the JobSet controller it bundles (its manager overlay), in
# kubeflow-system: what k8s/trainjob/'s TrainJob and ClusterTrainingRuntime need.
resource "terraform_data" "trainer" {
  triggers_replace = [var.trainer_version, module.eks.cluster_name]

  provisioner "local-exec" {
    command     = <<-EOT
      ${local.with_cluster}
      k apply --server-side -k \
        "https://github.com/kubeflow/trainer.git/manifests/overlays/manager?ref=$VERSION"
      k -n kubeflow-system wait --for=condition=Available deployment --all --timeout=300s
    EOT
    environment = merge(local.cluster_env, { VERSION = var.trainer_version })
    interpreter = ["/bin/bash", "-c"]
  }

  depends_on = [module.eks]
}

# Kueue: the release's manifests, then k8s/kueue/manager-config.yaml (waitForPodsReady with
# blockAdmission, the integrations) and a restart to read it. After the MPI operator and
# Trainer, whose kinds it manages. The queues themselves (k8s/kueue/, sized from the outputs)
# are applied by `make eks-up`.
resource "terraform_data" "kueue" {
  triggers_replace = [var.kueue_version, module.eks.cluster_name,
  filesha256("${path.module}/../k8s/kueue/manager-config.yaml")]

  provisioner "local-exec" {
    command = <<-EOT
      ${local.with_cluster}
      k apply --server-side -f \
        "https://github.com/kubernetes-sigs/kueue/releases/download/$VERSION/manifests.yaml"
      k apply -f "$CONFIG"
      k -n kueue-system rollout restart deployment/kueue-controller-manager
      k -n kueue-system rollout status deployment/kueue-controller-manager --timeout=300s
    EOT
    environment = merge(local.cluster_env, {
      VERSION = var.kueue_version
      CONFIG  = abspath("${path.module}/../k8s/kueue/manager-config.yaml")
    })
    interpreter = ["/bin/bash", "-c"]
  }

  depends_on = [terraform_data.mpi_operator, terraform_data.trainer]
}
