# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# Where there is no Docker (`make eks-run` on a laptop without it, or in CI): a CodeBuild project
# that builds k8s/image/Dockerfile.$FLAVOUR from a zip of the repository that k8s/eks.py puts at
# s3://BUCKET/build/source.zip, and pushes $REPOSITORY:$FLAVOUR-$TAG to the ECR repository.
# Idle, it costs nothing; a build is billed by the minute (the GPU image takes the longest).

locals {
  source_key = "build/source.zip" # k8s/eks.py uploads here
  buildspec  = <<-EOT
    version: 0.2
    phases:
      pre_build:
        commands:
          - aws ecr get-login-password --region "$AWS_REGION" | docker login --username AWS --password-stdin "$${REPOSITORY%%/*}"
      build:
        commands:
          - docker build -f "k8s/image/Dockerfile.$FLAVOUR" -t "$REPOSITORY:$FLAVOUR-$TAG" .
          - docker push "$REPOSITORY:$FLAVOUR-$TAG"
  EOT
}

resource "aws_codebuild_project" "images" {
  #checkov:skip=CKV_AWS_316:docker build needs privileged mode; the project builds only this repository's Dockerfiles
  #checkov:skip=CKV_AWS_147:no artifacts are stored; the images go to ECR, encrypted there with KMS
  name          = "${var.cluster_name}-images"
  description   = "Builds libddp's images (k8s/image) and pushes them to ${var.cluster_name}'s ECR repository"
  service_role  = aws_iam_role.codebuild.arn
  build_timeout = 180 # minutes: the GPU image (CUDA, the EFA installer, PyTorch, libddp)

  artifacts {
    type = "NO_ARTIFACTS"
  }

  environment {
    compute_type    = "BUILD_GENERAL1_LARGE"
    image           = "aws/codebuild/amazonlinux-x86_64-standard:5.0"
    type            = "LINUX_CONTAINER"
    privileged_mode = true

    environment_variable {
      name  = "REPOSITORY"
      value = aws_ecr_repository.libddp.repository_url
    }
  }

  source {
    type      = "S3"
    location  = "${aws_s3_bucket.data.id}/${local.source_key}"
    buildspec = local.buildspec
  }

  logs_config {
    cloudwatch_logs {
      group_name = "/codebuild/${var.cluster_name}-images"
    }
  }
}

resource "aws_iam_role" "codebuild" {
  name_prefix = "${var.cluster_name}-images-"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "codebuild.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })
}

# What a build needs: the source zip, a login to ECR and a push to this repository, its logs.
resource "aws_iam_role_policy" "codebuild" {
  name = "build-and-push"
  role = aws_iam_role.codebuild.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Effect   = "Allow"
        Action   = ["s3:GetObject", "s3:GetObjectVersion"]
        Resource = "${aws_s3_bucket.data.arn}/${local.source_key}"
      },
      {
        Effect   = "Allow"
        Action   = ["ecr:GetAuthorizationToken"]
        Resource = "*" # the token is account-wide; what it may push is below
      },
      {
        Effect = "Allow"
        Action = ["ecr:BatchCheckLayerAvailability", "ecr:InitiateLayerUpload",
          "ecr:UploadLayerPart", "ecr:CompleteLayerUpload", "ecr:PutImage",
        "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
        Resource = aws_ecr_repository.libddp.arn
      },
      {
        Effect   = "Allow"
        Action   = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"]
        Resource = "arn:aws:logs:${var.region}:${data.aws_caller_identity.current.account_id}:log-group:/codebuild/${var.cluster_name}-images*"
      },
    ]
  })
}
