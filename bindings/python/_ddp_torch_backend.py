# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Registers torch.distributed's backend "ddp" when torch loads its backends' entry points (the
"torch.backends" group, torch >= 2.5, at `import torch`), so that init_process_group("ddp")
works without `import ddp.torch`. It stays light and never fails: torch imports it in every
process, so it loads no part of libddp until the backend is first used (ddp/torch/c10d/)."""


def register():
    try:
        import torch.distributed as dist  # lazy: torch is importing this module

        if not dist.is_available() or hasattr(dist.Backend, "DDP"):
            return

        def create(options, backend_options=None):
            from ddp.torch import c10d  # lazy: the backend itself, on first use

            return c10d.create_extended(options, backend_options)

        dist.Backend.register_backend("ddp", create, extended_api=True, devices=["cpu", "cuda"])
    except Exception as e:  # noqa: BLE001 - a broken install must not break `import torch`
        import warnings  # lazy: only when registering failed

        warnings.warn(f"libddp: the torch.distributed backend 'ddp' is not registered: {e}",
                      RuntimeWarning, stacklevel=1)
