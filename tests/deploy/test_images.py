# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""k8s/image/: both Dockerfiles hadolint-clean, everything they COPY in the repository, apt's
package lists there wherever apt installs, and the entrypoint's wait for the hostfile's names
(what the launcher pod runs before mpirun)."""
import os
import subprocess

import pytest

import deploycheck as dc
from conftest import needs

ENTRYPOINT = dc.ROOT / "k8s" / "image" / "entrypoint.sh"


def test_there_is_a_cpu_and_a_gpu_efa_image():
    assert [d.name for d in dc.DOCKERFILES] == ["Dockerfile.cpu", "Dockerfile.gpu-efa"]
    gpu = (dc.ROOT / "k8s" / "image" / "Dockerfile.gpu-efa").read_text()
    for needed in ("efa_installer.sh -y -g", "-DDDP_WITH_MPI=ON", "-DDDP_WITH_OFI=ON",
                   "-DDDP_WITH_NCCL=ON", "/opt/amazon/ofi-nccl", "sshd"):
        assert needed in gpu, needed


@pytest.mark.parametrize("dockerfile", dc.DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_is_clean(dockerfile):
    needs("hadolint")
    assert dc.hadolint(dockerfile) == []


def test_hadolint_catches_a_planted_error(tmp_path):
    needs("hadolint")
    broken = tmp_path / "Dockerfile"
    broken.write_text(dc.DOCKERFILES[0].read_text().replace("FROM debian:12-slim",
                                                            "FROM debian:latest"))
    assert any("DL3007" in line for line in dc.hadolint(broken))


@pytest.mark.parametrize("dockerfile", dc.DOCKERFILES, ids=lambda p: p.name)
def test_apt_has_its_package_lists_wherever_it_installs(dockerfile):
    assert dc.apt_lists(dockerfile) == []


def test_an_installer_run_after_the_lists_went_is_caught(tmp_path):
    """The EFA installer installs .debs through apt: in a layer after the one that removed the
    package lists, without fetching them again, their dependencies cannot be resolved."""
    gpu = dc.DOCKERFILES[1]
    broken = tmp_path / gpu.name
    text = gpu.read_text()
    assert "RUN apt-get update \\\n    && curl" in text
    broken.write_text(text.replace("RUN apt-get update \\\n    && curl", "RUN curl"))
    found = "\n".join(dc.apt_lists(broken))
    assert "efa_installer.sh without apt-get update before it in the same RUN" in found, found


@pytest.mark.parametrize("dockerfile", dc.DOCKERFILES, ids=lambda p: p.name)
def test_everything_copied_is_in_the_repository(dockerfile, tmp_path):
    assert dc.dockerfile_sources(dockerfile) == []
    broken = tmp_path / dockerfile.name
    broken.write_text(dockerfile.read_text().replace("COPY examples", "COPY example"))
    assert dc.dockerfile_sources(broken) == [f"{dockerfile.name}: COPY example: not in the "
                                             "repository"]


@pytest.mark.parametrize("dockerfile", dc.DOCKERFILES, ids=lambda p: p.name)
def test_the_image_copies_what_the_cmake_build_reads(dockerfile, tmp_path):
    """CMakeLists.txt reads VERSION, cmake/package.cmake names LICENSE: an image that copies the
    sources alone fails at cmake's configure."""
    assert dc.build_inputs_copied(dockerfile) == []
    broken = tmp_path / dockerfile.name
    broken.write_text(dockerfile.read_text().replace("COPY CMakeLists.txt VERSION LICENSE ./",
                                                        "COPY CMakeLists.txt ./"))
    assert dc.build_inputs_copied(broken) == [
        f"{dockerfile.name}: the build reads LICENSE and the image does not COPY it",
        f"{dockerfile.name}: the build reads VERSION and the image does not COPY it"]


def entrypoint(tmp_path, hostfile_text, *command, wait="2"):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(hostfile_text)
    env = {**os.environ, "K_MPI_JOB_ROLE": "launcher", "DDP_DNS_WAIT_SECONDS": wait,
           "OMPI_MCA_orte_default_hostfile": str(hostfile)}
    return subprocess.run(["sh", str(ENTRYPOINT), *command], env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_entrypoint_runs_the_command_once_every_host_resolves(tmp_path):
    done = entrypoint(tmp_path, "# by the operator\nlocalhost slots=2\n\nlocalhost slots=2\n",
                      "echo", "started")
    assert done.returncode == 0 and done.stdout == "started\n", done


def test_the_entrypoint_names_a_host_that_never_resolves(tmp_path):
    done = entrypoint(tmp_path, "localhost slots=1\njob-worker-9.job.ns.invalid slots=1\n",
                      "echo", "started")
    assert done.returncode == 1 and done.stdout == ""
    assert "job-worker-9.job.ns.invalid (from" in done.stderr and "after 2s" in done.stderr


def test_the_gpu_image_keeps_one_nccl(tmp_path):
    """The CUDA image's NCCL and PyTorch's wheel's share a soname: with both, which one serves
    torch, libddp and aws-ofi-nccl depended on load order. Without the purge, the build against
    the wheel's and the count, the check names each."""
    gpu = dc.DOCKERFILES[1]
    assert dc.one_nccl(gpu) == [] and dc.one_nccl(dc.DOCKERFILES[0]) == []
    text = gpu.read_text()
    broken = tmp_path / gpu.name
    for line in ("    && apt-get purge -y --allow-change-held-packages libnccl2 libnccl-dev \\\n",
                 '      -DNCCL_LIBRARY="$site/nvidia/nccl/lib/libnccl.so.2" \\\n',
                 "    && ldconfig \\\n    && test \"$(find / -xdev -type f -name 'libnccl.so*' | "
                 "wc -l)\" = 1\n"):
        assert line in text, line
        text = text.replace(line, "")
    broken.write_text(text)
    found = "\n".join(dc.one_nccl(broken))
    for message in ("the CUDA image's NCCL (libnccl2) stays beside PyTorch's",
                    "not built against the wheel's NCCL", "no build step checks that one"):
        assert message in found, found


def test_the_gpu_image_has_the_efa_check():
    gpu = dc.DOCKERFILES[1].read_text()
    assert "COPY k8s/image/efa_check.py /usr/local/bin/ddp-efa-check" in gpu
    assert (dc.ROOT / "k8s" / "image" / "efa_check.py").stat().st_mode & 0o111
