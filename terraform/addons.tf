# What the MPIJobs need in the cluster: the NVIDIA and EFA device plugins (so that pods can ask
# for nvidia.com/gpu and vpc.amazonaws.com/efa), the FSx CSI driver, and the MPI operator.

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

# The Kubeflow MPI operator: its release manifests, applied server-side (its CRD is too large
# for a client-side apply's annotation). Runs where `terraform apply` runs: needs aws and kubectl.
resource "terraform_data" "mpi_operator" {
  triggers_replace = [var.mpi_operator_version, module.eks.cluster_name]

  provisioner "local-exec" {
    command = <<-EOT
      set -eu
      kubeconfig=$(mktemp)
      trap 'rm -f "$kubeconfig"' EXIT
      aws eks update-kubeconfig --region "$REGION" --name "$CLUSTER" --kubeconfig "$kubeconfig"
      kubectl --kubeconfig "$kubeconfig" apply --server-side -f \
        "https://raw.githubusercontent.com/kubeflow/mpi-operator/$VERSION/deploy/v2beta1/mpi-operator.yaml"
      kubectl --kubeconfig "$kubeconfig" -n mpi-operator rollout status deployment/mpi-operator --timeout=300s
    EOT
    environment = {
      REGION  = var.region
      CLUSTER = module.eks.cluster_name
      VERSION = var.mpi_operator_version
    }
    interpreter = ["/bin/bash", "-c"]
  }

  depends_on = [module.eks]
}
