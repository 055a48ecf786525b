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
