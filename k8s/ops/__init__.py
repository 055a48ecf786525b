# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What k8s/eks.py does, one concern a module: shell (commands, steps, dry runs), settings
(what the user asked for, checked before anything runs), outputs (terraform's), kube (the pinned
cluster), image (build and push, a tag built once), stack (terraform up and down), jobs (apply,
wait, report)."""
