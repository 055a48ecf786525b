# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# Monitoring: CloudWatch Container Insights with enhanced observability, through the EKS add-on
# amazon-cloudwatch-observability (main.tf's addons). The add-on runs the CloudWatch agent and
# NVIDIA's DCGM exporter on every node, so GPU metrics (utilisation, memory, power, temperature,
# NVLink and PCIe traffic) and EFA metrics (bytes and packets per device, RDMA reads and writes,
# retransmits) reach CloudWatch beside the pods' CPU, memory and network. Why CloudWatch and not
# an in-cluster Prometheus: this cluster is made for a run and destroyed when idle (its GPU nodes
# cost ~$110/h), and metrics must outlive it to compare runs; Prometheus would need its own
# storage, nodes and a place to keep its data after `terraform destroy`. The agent's identity is
# this role, given to its service account by EKS Pod Identity.

resource "aws_iam_role" "cloudwatch_agent" {
  name_prefix = "${var.cluster_name}-cw-agent-"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "pods.eks.amazonaws.com" }
      Action    = ["sts:AssumeRole", "sts:TagSession"]
    }]
  })
}

resource "aws_iam_role_policy_attachment" "cloudwatch_agent" {
  role       = aws_iam_role.cloudwatch_agent.name
  policy_arn = "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy"
}

# An alarm when a node fails (Container Insights' cluster_failed_node_count above 0 for 5
# minutes): its pods' ranks are lost. EKS node repair (main.tf) or Karpenter's (karpenter.tf)
# replaces the node; the jobs restart as k8s/README.md says ("A lost node"). To the SNS topic,
# and by mail where alarm_email is set (the subscription must be confirmed from the mail).
resource "aws_sns_topic" "alarms" {
  name              = "${var.cluster_name}-alarms"
  kms_master_key_id = "alias/aws/sns"
}

resource "aws_sns_topic_subscription" "alarm_email" {
  count     = var.alarm_email == null ? 0 : 1
  topic_arn = aws_sns_topic.alarms.arn
  protocol  = "email"
  endpoint  = var.alarm_email
}

resource "aws_cloudwatch_metric_alarm" "failed_nodes" {
  alarm_name          = "${var.cluster_name}-failed-nodes"
  alarm_description   = "A node of ${var.cluster_name} is not Ready: the ranks on it are lost (node repair replaces it)"
  namespace           = "ContainerInsights"
  metric_name         = "cluster_failed_node_count"
  dimensions          = { ClusterName = module.eks.cluster_name }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 5
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
}
