# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
variable "region" {
  description = "AWS region of the cluster (one where the GPU instance type is offered)."
  type        = string
  default     = "us-west-2"

  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region must be an AWS region name such as us-west-2."
  }
}

variable "cluster_name" {
  description = "Name of the EKS cluster; also prefixes the VPC, FSx and ECR names."
  type        = string
  default     = "libddp"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.cluster_name))
    error_message = "cluster_name must be 3-32 lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "kubernetes_version" {
  description = "EKS Kubernetes version, one in EKS standard support on the day of the plan (the calendar in the validation below): a cluster in extended support costs $0.60 per hour instead of $0.10."
  type        = string
  default     = "1.35"

  validation {
    # The end of EKS standard support of each version (EKS's release calendar, as recorded on
    # 2026-11-28: tests/deploy/module_inputs.py holds the same table and checks this one against
    # it). A version whose date has passed, or that is not listed, is refused at plan time.
    condition = timecmp(plantimestamp(), lookup({
      "1.32" = "2026-03-23T00:00:00Z"
      "1.33" = "2026-07-29T00:00:00Z"
      "1.34" = "2026-12-02T00:00:00Z"
      "1.35" = "2027-03-27T00:00:00Z"
    }, var.kubernetes_version, "1970-01-01T00:00:00Z")) < 0
    error_message = "kubernetes_version ${var.kubernetes_version} is not in EKS standard support today (1.35 is, until 2027-03-27): extended support costs 6x the control plane's $0.10/h. For a newer version, add it and its end of standard support (EKS's release calendar) to this validation."
  }
}

variable "vpc_cidr" {
  description = "CIDR of the VPC; split into public and private subnets in two availability zones."
  type        = string
  default     = "10.0.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 18
    error_message = "vpc_cidr must be an IPv4 CIDR of /18 or larger (pods take VPC addresses)."
  }
}

variable "endpoint_public_cidrs" {
  description = "Addresses allowed to reach the cluster's public API endpoint (your own, not 0.0.0.0/0)."
  type        = list(string)

  validation {
    condition     = length(var.endpoint_public_cidrs) > 0 && alltrue([for c in var.endpoint_public_cidrs : can(cidrhost(c, 0)) && c != "0.0.0.0/0"])
    error_message = "endpoint_public_cidrs must list IPv4 CIDRs, none of them 0.0.0.0/0."
  }
}

variable "gpu_instance_type" {
  description = "Instance type of the GPU node group: 8 GPUs and 32 EFA devices, as the gpu-efa MPIJobs ask (other types need their counts changed there)."
  type        = string
  default     = "p5.48xlarge"

  validation {
    condition     = contains(["p5.48xlarge", "p5e.48xlarge"], var.gpu_instance_type)
    error_message = "gpu_instance_type must be p5.48xlarge or p5e.48xlarge (8 GPUs, 32 EFA devices: k8s/mpijob/overlays/gpu-efa asks for those)."
  }
}

variable "gpu_availability_zone" {
  description = "Zone of the GPU nodes and FSx (that of your capacity reservation); null: the first zone of the region that offers gpu_instance_type."
  type        = string
  default     = null

  validation {
    condition     = var.gpu_availability_zone == null || can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9][a-z]$", var.gpu_availability_zone))
    error_message = "gpu_availability_zone must be a zone name such as us-west-2b, or null."
  }
}

variable "gpu_nodes" {
  description = "GPU nodes: the MPIJobs in k8s/mpijob/overlays/gpu-efa use 2 (one worker pod each)."
  type        = number
  default     = 2

  validation {
    condition     = var.gpu_nodes >= 2 && var.gpu_nodes <= 64 && floor(var.gpu_nodes) == var.gpu_nodes
    error_message = "gpu_nodes must be a whole number from 2 (a job across hosts) to 64."
  }
}

variable "gpu_capacity_reservation_id" {
  description = "On-Demand Capacity Reservation the GPU nodes start in (p5 is rarely available without one), in gpu_availability_zone; gpu_placement_group must then name the placement group it was made in (\"\" for none); null: no reservation."
  type        = string
  default     = null

  validation {
    condition     = var.gpu_capacity_reservation_id == null || can(regex("^cr-[0-9a-f]{17}$", var.gpu_capacity_reservation_id))
    error_message = "gpu_capacity_reservation_id must be a capacity reservation id (cr-...) or null."
  }
}

variable "gpu_placement_group" {
  description = "Cluster placement group of the GPU nodes (managed and Karpenter's): the one your capacity reservation was made in, \"\" for none (a reservation outside any group, Capacity Blocks), or null for one terraform makes (CLUSTER-gpu-efa; without a reservation only)."
  type        = string
  default     = null

  validation {
    # A reservation's instances launch where it is: in its placement group or in none. One of
    # terraform's own would hold no reserved capacity, and p5 rarely has any other.
    condition     = var.gpu_capacity_reservation_id == null || var.gpu_placement_group != null
    error_message = "gpu_capacity_reservation_id is set: set gpu_placement_group to the placement group the reservation was made in (aws ec2 describe-capacity-reservations shows its PlacementGroupArn), or to \"\" if it has none."
  }
}

variable "cpu_instance_type" {
  description = "Instance type of the CPU node group (the cpu overlay's workers, launchers)."
  type        = string
  default     = "c6i.4xlarge"
}

variable "cpu_nodes" {
  description = "CPU nodes for the cpu overlay (2 worker pods of 2 CPUs each fit on one)."
  type        = number
  default     = 2

  validation {
    condition     = var.cpu_nodes >= 0 && var.cpu_nodes <= 100 && floor(var.cpu_nodes) == var.cpu_nodes
    error_message = "cpu_nodes must be a whole number from 0 to 100."
  }
}

variable "fsx_storage_capacity_gib" {
  description = "FSx for Lustre capacity in GiB (PERSISTENT_2: 1200, 2400, then multiples of 2400)."
  type        = number
  default     = 1200

  validation {
    condition     = var.fsx_storage_capacity_gib == 1200 || (var.fsx_storage_capacity_gib >= 2400 && var.fsx_storage_capacity_gib % 2400 == 0)
    error_message = "fsx_storage_capacity_gib must be 1200, or a multiple of 2400."
  }
}

variable "fsx_throughput_per_tib" {
  description = "FSx for Lustre PERSISTENT_2 throughput, MB/s per TiB of storage."
  type        = number
  default     = 250

  validation {
    condition     = contains([125, 250, 500, 1000], var.fsx_throughput_per_tib)
    error_message = "fsx_throughput_per_tib must be 125, 250, 500 or 1000."
  }
}

variable "mpi_operator_version" {
  description = "Release of the Kubeflow MPI operator whose manifests are applied."
  type        = string
  default     = "v0.8.2"

  validation {
    condition     = can(regex("^v0\\.[0-9]+\\.[0-9]+$", var.mpi_operator_version))
    error_message = "mpi_operator_version must be a release tag such as v0.8.2."
  }
}

variable "karpenter" {
  description = "Install Karpenter (terraform/karpenter.tf, k8s/karpenter/): GPU+EFA nodes from capacity reservations and Capacity Blocks only while a job runs, CPU nodes on demand; the managed cpu and gpu node groups then start empty."
  type        = bool
  default     = false
}

variable "karpenter_version" {
  description = "Karpenter's Helm chart version: 1.11 or later (the GPU EC2NodeClass's placementGroupSelector; its v1 CRDs are what k8s/karpenter/ is validated against)."
  type        = string
  default     = "1.14.1"

  validation {
    condition     = can(regex("^1\\.(1[1-9]|[2-9][0-9])\\.[0-9]+$", var.karpenter_version))
    error_message = "karpenter_version must be 1.11.0 or a later 1.x release (placementGroupSelector came in 1.11), such as 1.14.1."
  }
}

variable "karpenter_chart_repository" {
  description = "The OCI repository Karpenter's chart is published in, as Karpenter's install guide gives it (oci://HOST/karpenter); needed when karpenter = true."
  type        = string
  default     = null

  validation {
    condition     = var.karpenter_chart_repository == null || can(regex("^oci://", var.karpenter_chart_repository))
    error_message = "karpenter_chart_repository must be an oci:// address."
  }
}

variable "kueue_version" {
  description = "Release of Kueue (gang admission of the jobs: k8s/kueue/) whose manifests are applied."
  type        = string
  default     = "v0.19.2"

  validation {
    condition     = can(regex("^v0\\.(19|[2-9][0-9])\\.[0-9]+$", var.kueue_version))
    error_message = "kueue_version must be v0.19.0 or later (k8s/kueue/ uses the v1beta2 API and its manager configuration), such as v0.19.2."
  }
}

variable "trainer_version" {
  description = "Release of Kubeflow Trainer v2 (with the JobSet it bundles) whose manifests are applied, for k8s/trainjob/: the one Kueue's TrainJob integration is built against."
  type        = string
  default     = "v2.2.1"

  validation {
    condition     = can(regex("^v2\\.[0-9]+\\.[0-9]+$", var.trainer_version))
    error_message = "trainer_version must be a Trainer v2 release tag such as v2.2.1."
  }
}

variable "alarm_email" {
  description = "Where the cluster's alarms (a failed node, monitoring.tf) are mailed; null: the SNS topic alone (subscribe to it as you like)."
  type        = string
  default     = null

  validation {
    condition     = var.alarm_email == null || can(regex("^[^@ ]+@[^@ ]+\\.[^@ ]+$", var.alarm_email))
    error_message = "alarm_email must be an e-mail address or null."
  }
}

variable "tags" {
  description = "Tags on every AWS resource."
  type        = map(string)
  default     = { project = "libddp" }
}
