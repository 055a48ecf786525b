# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# Image pulls without the NAT gateway: the ECR API and registry endpoints (interface, private
# DNS, so the nodes' usual ECR names resolve to them) and S3's gateway endpoint, where ECR keeps
# the image layers (and FSx's bucket is). A first pull of the GPU image (~15 GB) by each GPU node
# then costs $0.01/GB through the endpoints instead of $0.045/GB through the NAT gateway, and
# does not share its bandwidth. The interface endpoints cost $0.01/h each per zone (4 here).

resource "aws_security_group" "endpoints" {
  name        = "${var.cluster_name}-endpoints"
  description = "HTTPS to the VPC endpoints from within the VPC"
  vpc_id      = module.vpc.vpc_id
}

resource "aws_vpc_security_group_ingress_rule" "endpoints_https" {
  security_group_id = aws_security_group.endpoints.id
  description       = "HTTPS from the VPC"
  cidr_ipv4         = var.vpc_cidr
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_endpoint" "ecr" {
  for_each            = toset(["ecr.api", "ecr.dkr"])
  vpc_id              = module.vpc.vpc_id
  service_name        = "com.amazonaws.${var.region}.${each.key}"
  vpc_endpoint_type   = "Interface"
  subnet_ids          = module.vpc.private_subnets
  security_group_ids  = [aws_security_group.endpoints.id]
  private_dns_enabled = true
}

resource "aws_vpc_endpoint" "s3" {
  vpc_id            = module.vpc.vpc_id
  service_name      = "com.amazonaws.${var.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = module.vpc.private_route_table_ids
}
