# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""terraform/: formatted, parsed, every reference declared, checkov's checks passed (or skipped
in the code with a reason), variables validated; each check also fed a broken copy.
`terraform init`/`validate` need the providers and modules, which this machine cannot download:
terraform/README.md makes them the user's first step."""
import re
import shutil
import subprocess

import pytest

import cluster_fit as cf
import deploycheck as dc
from conftest import needs

TF = dc.ROOT / "terraform"


def test_terraform_is_formatted(copy_of):
    if shutil.which("terraform") is None:
        pytest.skip("terraform is not installed here")
    assert dc.terraform_fmt(TF) == []
    broken = copy_of("terraform")
    main = broken / "main.tf"
    main.write_text(main.read_text().replace("  name = var.cluster_name",
                                             "  name=var.cluster_name"))
    assert dc.terraform_fmt(broken) != []


def test_the_hcl_parses(copy_of):
    assert dc.terraform_parse(TF) == []
    broken = copy_of("terraform")
    (broken / "outputs.tf").write_text((broken / "outputs.tf").read_text() + "\noutput \"x\" {\n")
    assert "HCL parse" in "\n".join(dc.terraform_parse(broken))


def test_every_reference_is_declared(copy_of):
    assert dc.terraform_references(TF) == []
    broken = copy_of("terraform")
    main = broken / "main.tf"
    text = main.read_text().replace("var.vpc_cidr", "var.vpc_cdir", 1)
    text = text.replace("module.vpc.vpc_id", "module.network.vpc_id")
    main.write_text(text)
    fsx = broken / "fsx.tf"
    fsx.write_text(fsx.read_text().replace("aws_security_group.fsx.id",
                                           "aws_security_group.lustre.id", 1))
    addons = broken / "addons.tf"
    addons.write_text(addons.read_text().replace("local.gpu_toleration", "local.gpu_tolerations"))
    found = "\n".join(dc.terraform_references(broken))
    for wrong in ("var.vpc_cdir", "module.network", "aws_security_group.lustre",
                  "local.gpu_tolerations"):
        assert f"{wrong} is not declared" in found, found


def test_module_and_node_group_inputs_are_the_modules_own(copy_of):
    assert dc.module_inputs(TF) == []
    broken = copy_of("terraform")
    main = broken / "main.tf"
    text = main.read_text().replace("endpoint_public_access_cidrs", "endpoint_public_access_cidr")
    text = text.replace("network_interfaces = local", "network_interface = local")
    main.write_text(text.replace("single_nat_gateway", "one_nat_gateways"))
    found = "\n".join(dc.module_inputs(broken))
    assert "endpoint_public_access_cidr is not an input of terraform-aws-modules/eks/aws" in found
    assert "node group gpu: network_interface is not an input" in found
    assert "one_nat_gateways is not an input of terraform-aws-modules/vpc/aws" in found


def test_the_references_are_really_seen():
    """The check above is only worth something if it sees the references that are there."""
    text = "\n".join(p.read_text() for p in TF.glob("*.tf"))
    for kind in ("var", "local", "module", "data.aws_caller_identity", "aws_security_group"):
        assert re.search(rf"\b{re.escape(kind)}\.\w+", text), kind


def test_variables_are_validated():
    variables = dc._hcl(TF)[TF / "variables.tf"]["variable"]
    validated = {name for block in variables for name, body in block.items()
                 if body.get("validation")}
    assert {"gpu_nodes", "gpu_instance_type", "cluster_name", "region", "endpoint_public_cidrs",
            "fsx_storage_capacity_gib"} <= validated
    gpu_nodes = next(b["gpu_nodes"] for b in variables if "gpu_nodes" in b)
    assert "var.gpu_nodes >= 2" in str(gpu_nodes["validation"][0]["condition"])


def test_checkov_passes_and_catches_a_planted_finding(copy_of):
    needs("checkov")
    assert dc.checkov(TF) == []
    broken = copy_of("terraform")
    (broken / "open.tf").write_text('''resource "aws_security_group" "open" {
  name        = "open"
  description = "ssh from anywhere"
  vpc_id      = module.vpc.vpc_id

  ingress {
    description = "ssh"
    from_port   = 22
    to_port     = 22
    protocol    = "tcp"
    cidr_blocks = ["0.0.0.0/0"]
  }
}
''')
    found = "\n".join(dc.checkov(broken))
    assert "CKV_AWS_24" in found, found  # port 22 open to the world


def test_the_default_kubernetes_version_is_in_standard_support(copy_of):
    """1.33, the old default, left EKS standard support on 2026-07-29: a cluster made in 2026-11
    paid extended support's $0.60/h for its control plane, not the $0.10 the cost table said."""
    assert dc.kubernetes_version_support(TF) == []
    broken = copy_of("terraform")
    variables = broken / "variables.tf"
    variables.write_text(variables.read_text().replace('default     = "1.35"',
                                                       'default     = "1.33"'))
    assert "defaults to 1.33, but the manifests are validated against 1.35" in \
        dc.kubernetes_version_support(broken)[0]
    old = dc.KUBERNETES_VERSION
    try:
        dc.KUBERNETES_VERSION = "1.33"
        assert "1.33 leaves EKS standard support on 2026-07-29" in \
            dc.kubernetes_version_support(broken)[0]
    finally:
        dc.KUBERNETES_VERSION = old


def test_gpu_and_efa_metrics_reach_cloudwatch(copy_of):
    """Monitoring is the amazon-cloudwatch-observability add-on (the CloudWatch agent and the
    DCGM exporter), whose agent gets CloudWatchAgentServerPolicy through EKS Pod Identity; an
    add-on attribute misspelt is caught like a module input."""
    blocks = dc._hcl(TF)
    eks = next(body for b in blocks[TF / "main.tf"]["module"] for name, body in b.items()
               if name == "eks")
    one = cf._one
    addon = one(one(eks["addons"])["amazon-cloudwatch-observability"])
    association = one(addon["pod_identity_association"])
    assert association["service_account"] == "cloudwatch-agent"
    assert "aws_iam_role.cloudwatch_agent.arn" in association["role_arn"]
    monitoring = blocks[TF / "monitoring.tf"]["resource"]
    attachment = next(b["aws_iam_role_policy_attachment"]["cloudwatch_agent"] for b in monitoring
                      if "aws_iam_role_policy_attachment" in b)
    assert one(attachment["policy_arn"]).endswith(":policy/CloudWatchAgentServerPolicy")
    role = next(b["aws_iam_role"]["cloudwatch_agent"] for b in monitoring if "aws_iam_role" in b)
    assert "pods.eks.amazonaws.com" in str(role["assume_role_policy"])

    broken = copy_of("terraform")
    main = broken / "main.tf"
    main.write_text(main.read_text().replace("pod_identity_association = [{",
                                             "pod_identity_associations = [{"))
    assert "add-on amazon-cloudwatch-observability: pod_identity_associations is not an " \
           "attribute" in "\n".join(dc.module_inputs(broken))


def test_karpenter_is_an_option_with_what_its_node_classes_name(copy_of):
    """karpenter = true: the submodule with the fixed node role name k8s/karpenter/ uses, the
    chart with the reserved-capacity feature gate, the placement group and EFA security group
    the GPU EC2NodeClass selects; its inputs are the submodule's own."""
    import yaml
    text = (TF / "karpenter.tf").read_text()
    assert 'node_iam_role_name            = "${var.cluster_name}-karpenter-node"' in text
    assert "reservedCapacity = true" in text
    node_class = yaml.safe_load((dc.ROOT / "k8s" / "karpenter" /
                                 "ec2nodeclass-gpu-efa.yaml").read_text())
    assert node_class["spec"]["role"] == "libddp-karpenter-node"  # cluster_name's default
    assert node_class["spec"]["placementGroupSelector"]["name"] == "libddp-gpu-efa"
    assert {"libddp/efa": "libddp"} in [t["tags"] for t in
                                        node_class["spec"]["securityGroupSelectorTerms"]]
    assert 'name     = "${var.cluster_name}-gpu-efa"' in (TF / "gpu.tf").read_text()
    assert 'tags        = { "libddp/efa" = var.cluster_name }' in text
    broken = copy_of("terraform")
    karpenter = broken / "karpenter.tf"
    karpenter.write_text(text.replace("node_iam_role_use_name_prefix", "node_role_use_name_prefix"))
    assert "module karpenter: node_role_use_name_prefix is not an input of " \
           "terraform-aws-modules/eks/aws//modules/karpenter" in "\n".join(dc.module_inputs(broken))


def test_codebuild_builds_what_eks_run_uploads_and_pushes_only_to_the_repository():
    """Where there is no Docker, k8s/eks.py zips the commit to s3://BUCKET/build/source.zip and
    starts terraform's CodeBuild project with FLAVOUR and TAG; the project reads that key,
    builds k8s/image/Dockerfile.$FLAVOUR privileged, pushes $REPOSITORY:$FLAVOUR-$TAG (the tag
    eks.py then deploys), and its role may push to this repository alone."""
    one = cf._one
    blocks = dc._hcl(TF)[TF / "codebuild.tf"]
    local = one(blocks["locals"])
    eks = (dc.ROOT / "k8s" / "ops" / "image.py").read_text()
    assert f"/{one(local['source_key'])}\"" in eks  # the same key
    assert 'f"{flavour}-{commit}"' in eks and "name=TAG,value={image_tag}" in eks
    buildspec = one(local["buildspec"])
    assert 'docker build -f "k8s/image/Dockerfile.$FLAVOUR" -t "$REPOSITORY:$FLAVOUR-$TAG" .' in \
        buildspec and 'docker push "$REPOSITORY:$FLAVOUR-$TAG"' in buildspec
    project = next(b["aws_codebuild_project"]["images"] for b in blocks["resource"]
                   if "aws_codebuild_project" in b)
    environment = one(project["environment"])
    assert one(environment["privileged_mode"]) in (True, "true")
    assert "aws_ecr_repository.libddp.repository_url" in str(environment["environment_variable"])
    assert "local.source_key" in one(one(project["source"])["location"])
    policy = str(next(b["aws_iam_role_policy"]["codebuild"] for b in blocks["resource"]
                      if "aws_iam_role_policy" in b)["policy"])
    assert "ecr:PutImage" in policy and "aws_ecr_repository.libddp.arn" in policy



def plan_variables(tmp_path, *args):
    """terraform's own verdict on variables.tf's validations: the file alone in a folder (no
    providers or modules to download), planned with ARGS."""
    folder = tmp_path / "variables"
    folder.mkdir(exist_ok=True)
    shutil.copy(TF / "variables.tf", folder)

    def run(*args):
        return subprocess.run(["terraform", f"-chdir={folder}", *args], capture_output=True,
                              text=True, timeout=120)
    assert run("init", "-input=false").returncode == 0
    done = run("plan", "-input=false", "-no-color", "-var",
               'endpoint_public_cidrs=["203.0.113.7/32"]', *args)
    return done.returncode, " ".join((done.stdout + done.stderr).split())


@pytest.mark.parametrize("args, refusal", [
    ([], None),
    (["-var", "kubernetes_version=1.34"], "kubernetes_version 1.34 is not in EKS standard support"),
    (["-var", "kubernetes_version=1.28"], "kubernetes_version 1.28 is not in EKS standard support"),
    (["-var", "gpu_capacity_reservation_id=cr-0123456789abcdef0"],
     "set gpu_placement_group to the placement group the reservation was made in"),
    (["-var", "gpu_capacity_reservation_id=cr-0123456789abcdef0", "-var", "gpu_placement_group="],
     None),
    (["-var", "karpenter_version=1.10.2"], "karpenter_version must be 1.11.0 or a later"),
    (["-var", "kueue_version=v0.14.0"], "kueue_version must be v0.19.0 or later"),
    (["-var", "alarm_email=nobody"], "alarm_email must be an e-mail address"),
])
def test_terraform_itself_applies_the_validations(tmp_path, args, refusal):
    """Run by terraform (offline: variables.tf alone): the old check let 1.28-1.34 through, out
    of standard support; a capacity reservation's nodes went into a placement group of their
    own, outside the reservation's; placementGroupSelector needs Karpenter 1.11."""
    if shutil.which("terraform") is None:
        pytest.skip("terraform is not installed here")
    status, out = plan_variables(tmp_path, *args)
    if refusal is None:
        assert status == 0, out
    else:
        assert status != 0 and refusal in out, out


def test_the_version_calendar_is_written_once():
    """variables.tf's validation and module_inputs.py hold the same end-of-support dates (for
    the versions still in standard support when the calendar was recorded)."""
    from module_inputs import CALENDAR_RECORDED, EKS_STANDARD_SUPPORT_ENDS
    text = (TF / "variables.tf").read_text()
    written = dict(re.findall(r'"(1\.\d+)" = "(\d{4}-\d\d-\d\d)T00:00:00Z"', text))
    assert written == EKS_STANDARD_SUPPORT_ENDS, written
    assert max(written.values()) > CALENDAR_RECORDED


def test_the_gpu_nodes_go_where_their_reservation_is(copy_of):
    """The eks module's enable_efa_support always made a placement group of its own, so a
    capacity reservation's instances were asked for outside the reservation's group. The GPU
    group now writes its EFA interfaces itself and takes local.gpu_placement_group (gpu.tf's,
    the reservation's, or none), as Karpenter's GPU nodes do (the gpu_placement_group output)."""
    eks = cf.eks_module(TF)
    gpu = cf._one(cf._one(eks["eks_managed_node_groups"])["gpu"])
    assert "enable_efa_support" not in gpu
    assert "local.gpu_placement_group" in str(gpu["placement"])
    assert "local.gpu_network_interfaces" in str(gpu["network_interfaces"])
    for rules in ("security_group_ingress_rules", "security_group_egress_rules"):
        rule = cf._one(cf._one(gpu[rules])["all_self_efa"])
        assert cf._one(rule["ip_protocol"]) == "-1" and cf._one(rule["self"]) in (True, "true")
    main = (TF / "main.tf").read_text()
    assert 'interface_type              = i == 0 ? "efa" : "efa-only"' in main
    assert "data.aws_ec2_instance_type.gpu.maximum_network_cards" in main
    outputs = (TF / "outputs.tf").read_text()
    assert 'output "gpu_placement_group"' in outputs and "local.gpu_placement_group" in outputs


def test_nodes_are_repaired_and_a_failed_one_raises_an_alarm():
    eks = cf.eks_module(TF)
    groups = cf._one(eks["eks_managed_node_groups"])
    for name, group in groups.items():
        assert cf._one(group.get("node_repair_config")) == {"enabled": True}, name
    assert "eks-node-monitoring-agent" in cf._one(eks["addons"])
    assert "nodeRepair = true" in (TF / "karpenter.tf").read_text()
    monitoring = (TF / "monitoring.tf").read_text()
    assert 'metric_name         = "cluster_failed_node_count"' in monitoring
    assert "alarm_actions       = [aws_sns_topic.alarms.arn]" in monitoring


def test_the_modules_are_at_least_the_version_karpenter_needs():
    """placementGroupSelector (the GPU EC2NodeClass) needs the karpenter submodule's
    DescribePlacementGroups, added in 21.18; the floor was 21.15."""
    for blocks in dc._hcl(TF).values():
        for block in blocks.get("module", []):
            for name, body in block.items():
                if "terraform-aws-modules/eks" in str(body["source"]):
                    version = cf._one(body["version"])
                    assert re.fullmatch(r"~> 21\.(1[89]|[2-9]\d)", version), (name, version)


def test_trainer_jobset_and_kueue_are_installed_pinned():
    """OVERLAY=trainjob failed on the stack eks-up built (no Trainer, no JobSet), and nothing
    admitted whole jobs. Kueue comes after the controllers whose kinds it manages, with its
    configuration (k8s/kueue/manager-config.yaml)."""
    addons = dc._hcl(TF)[TF / "addons.tf"]["resource"]
    installs = {name: body for b in addons for name, body in b.get("terraform_data", {}).items()}
    assert {"mpi_operator", "trainer", "kueue"} <= set(installs)
    text = (TF / "addons.tf").read_text()
    assert "kubeflow/trainer.git/manifests/overlays/manager?ref=$VERSION" in text
    assert "kubernetes-sigs/kueue/releases/download/$VERSION/manifests.yaml" in text
    assert "terraform_data.mpi_operator" in str(installs["kueue"]["depends_on"])
    assert "terraform_data.trainer" in str(installs["kueue"]["depends_on"])
    variables = {n: b for blocks in dc._hcl(TF)[TF / "variables.tf"]["variable"]
                 for n, b in blocks.items()}
    assert cf._one(variables["kueue_version"]["default"]) == "v0.19.2"
    assert cf._one(variables["trainer_version"]["default"]) == "v2.2.1"
    assert (dc.ROOT / "k8s" / "kueue" / "manager-config.yaml").exists()
    assert "${path.module}/../k8s/kueue/manager-config.yaml" in text


def test_images_are_pulled_through_vpc_endpoints():
    text = (TF / "endpoints.tf").read_text()
    assert 'toset(["ecr.api", "ecr.dkr"])' in text and "private_dns_enabled = true" in text
    assert 'vpc_endpoint_type = "Gateway"' in text and "module.vpc.private_route_table_ids" in text
