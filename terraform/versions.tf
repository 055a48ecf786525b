# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
terraform {
  required_version = ">= 1.9.0" # validations that read other variables

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.28" # the eks (~> 21) and vpc (~> 6) modules need >= 6.28
    }
    helm = {
      source  = "hashicorp/helm"
      version = "~> 3.1" # 3.x: `kubernetes = {...}` and `set = [...]` are attributes
    }
  }
}
