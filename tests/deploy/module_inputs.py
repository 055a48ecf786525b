# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The input names of the registry modules terraform/ uses, as data: terraform/ cannot be
`terraform validate`d here (the modules and providers cannot be downloaded), so the tests check
every argument given to a module (and to an EKS managed node group) against these lists.
From the modules' variables.tf: terraform-aws-modules/eks v21.19.0 (commit bef29c4d), root
variables and the eks_managed_node_groups object type; terraform-aws-modules/vpc v6.6.0, the
inputs this project uses, each confirmed there."""

EKS_V21 = set("""
create prefix_separator region tags name kubernetes_version enabled_log_types deletion_protection
force_update_version authentication_mode compute_config control_plane_scaling_config
upgrade_policy remote_network_config zonal_shift_config additional_security_group_ids
control_plane_subnet_ids subnet_ids endpoint_private_access endpoint_public_access
endpoint_public_access_cidrs ip_family service_ipv4_cidr service_ipv6_cidr outpost_config
encryption_config attach_encryption_policy cluster_tags create_primary_security_group_tags
timeouts access_entries enable_cluster_creator_admin_permissions create_kms_key
kms_key_description kms_key_deletion_window_in_days enable_kms_key_rotation
kms_key_rotation_period_in_days kms_key_enable_default_policy kms_key_owners
kms_key_administrators kms_key_users kms_key_service_users kms_key_source_policy_documents
kms_key_override_policy_documents kms_key_aliases create_cloudwatch_log_group
cloudwatch_log_group_retention_in_days cloudwatch_log_group_kms_key_id cloudwatch_log_group_class
cloudwatch_log_group_tags create_security_group security_group_id vpc_id security_group_name
security_group_use_name_prefix security_group_description security_group_additional_rules
security_group_tags create_cni_ipv6_iam_policy create_node_security_group node_security_group_id
node_security_group_name node_security_group_use_name_prefix node_security_group_description
node_security_group_additional_rules node_security_group_enable_recommended_rules
node_security_group_tags enable_irsa openid_connect_audiences include_oidc_root_ca_thumbprint
custom_oidc_thumbprints create_iam_role iam_role_arn iam_role_name iam_role_use_name_prefix
iam_role_path iam_role_description iam_role_permissions_boundary iam_role_additional_policies
iam_role_tags encryption_policy_use_name_prefix encryption_policy_name
encryption_policy_description encryption_policy_path encryption_policy_tags
dataplane_wait_duration enable_auto_mode_custom_tags create_auto_mode_iam_resources addons
addons_timeouts identity_providers create_node_iam_role node_iam_role_name
node_iam_role_use_name_prefix node_iam_role_path node_iam_role_description
node_iam_role_permissions_boundary node_iam_role_additional_policies node_iam_role_tags
fargate_profiles self_managed_node_groups eks_managed_node_groups
""".split()) | {"source", "version", "providers", "depends_on", "count", "for_each"}

EKS_V21_MANAGED_NODE_GROUP = set("""
create kubernetes_version name use_name_prefix subnet_ids min_size max_size desired_size ami_id
ami_type ami_release_version use_latest_ami_release_version capacity_type disk_size
force_update_version instance_types labels node_repair_config remote_access taints update_config
timeouts enable_bootstrap_user_data pre_bootstrap_user_data post_bootstrap_user_data
bootstrap_extra_args user_data_template_path cloudinit_pre_nodeadm cloudinit_post_nodeadm
create_launch_template use_custom_launch_template launch_template_id launch_template_name
launch_template_use_name_prefix launch_template_version launch_template_default_version
update_launch_template_default_version launch_template_description launch_template_tags
tag_specifications ebs_optimized key_name disable_api_termination kernel_id ram_disk_id
block_device_mappings capacity_reservation_specification cpu_options credit_specification
enclave_options instance_market_options license_specifications metadata_options
enable_monitoring enable_efa_support enable_efa_only efa_indices create_placement_group placement
network_interfaces maintenance_options private_dns_name_options create_iam_role iam_role_arn
iam_role_name iam_role_use_name_prefix iam_role_path iam_role_description
iam_role_permissions_boundary iam_role_tags iam_role_attach_cni_policy
iam_role_additional_policies create_iam_role_policy iam_role_policy_statements
vpc_security_group_ids attach_cluster_primary_security_group cluster_primary_security_group_id
create_security_group security_group_name security_group_use_name_prefix
security_group_description security_group_ingress_rules security_group_egress_rules
security_group_tags tags
""".split())

# The attributes of one entry of the eks module's `addons` map (variables.tf, v21.19.0).
EKS_V21_ADDON = set("""
name before_compute most_recent addon_version configuration_values pod_identity_association
preserve resolve_conflicts_on_create resolve_conflicts_on_update service_account_role_arn
timeouts tags
""".split())

VPC_V6_USED = set("""
source version name cidr azs private_subnets public_subnets enable_nat_gateway single_nat_gateway
public_subnet_tags private_subnet_tags tags
""".split())

# terraform-aws-modules/eks v21.19.0, modules/karpenter/variables.tf (every input).
EKS_V21_KARPENTER = set("""
create tags cluster_name region create_iam_role enable_inline_policy iam_role_name
iam_role_use_name_prefix iam_role_path iam_role_description iam_role_max_session_duration
iam_role_permissions_boundary_arn iam_role_tags iam_policy_name iam_policy_use_name_prefix
iam_policy_path iam_policy_description iam_role_override_assume_policy_documents
iam_role_source_assume_policy_documents iam_policy_statements iam_role_policies
ami_id_ssm_parameter_arns create_pod_identity_association namespace service_account
enable_spot_termination queue_name queue_managed_sse_enabled queue_kms_master_key_id
queue_kms_data_key_reuse_period_seconds queue_policy_statements create_node_iam_role
cluster_ip_family node_iam_role_arn node_iam_role_name node_iam_role_use_name_prefix
node_iam_role_path node_iam_role_description node_iam_role_max_session_duration
node_iam_role_permissions_boundary node_iam_role_attach_cni_policy
node_iam_role_additional_policies node_iam_role_tags create_access_entry access_entry_type
create_instance_profile rule_name_prefix
""".split()) | {"source", "version", "providers", "depends_on", "count", "for_each"}

MODULES = {"terraform-aws-modules/eks/aws": EKS_V21, "terraform-aws-modules/vpc/aws": VPC_V6_USED,
           "terraform-aws-modules/eks/aws//modules/karpenter": EKS_V21_KARPENTER}

# What the EKS module's node security group lets in from the other nodes (rules with self = true)
# before any additional rule: node_groups.tf's ingress_self_coredns_tcp/udp, and the recommended
# ingress_nodes_ephemeral (on unless node_security_group_enable_recommended_rules = false).
# (protocol, first port, last port).
EKS_V21_NODE_SELF_INGRESS = [("tcp", 53, 53), ("udp", 53, 53)]
EKS_V21_NODE_SELF_INGRESS_RECOMMENDED = [("tcp", 1025, 65535)]

# EKS's release calendar (docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html):
# the end of standard support of each version, as recorded on CALENDAR_RECORDED. After it a
# cluster is in extended support, whose control plane costs $0.60 per hour instead of $0.10.
CALENDAR_RECORDED = "2026-11-28"
EKS_STANDARD_SUPPORT_ENDS = {"1.32": "2026-03-23", "1.33": "2026-07-29", "1.34": "2026-12-02",
                             "1.35": "2027-03-27"}
