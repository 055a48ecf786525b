# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""SyncBatchNorm: batch normalization with the statistics of the whole batch across ranks
(Horovod's hvd.SyncBatchNorm), on CPU and CUDA tensors.

Forward (training): each rank's per-channel count, mean and variance (two-pass, locally) are
allgathered and combined exactly (the parallel variance formula), so every rank normalizes with
the global mean and variance; the running statistics take the unbiased global variance.
Backward: the per-channel sums of the gradient and of gradient * (x - mean) are allreduced, which
is what the input's gradient needs; the weight's and bias's gradients stay local (the optimizer
reduces them with the other parameters), as in torch.nn.SyncBatchNorm and Horovod.
"""

import torch
import torch.nn.functional as F

from .. import _ddp, _ops
from .._ops import ReduceOp, error
from . import functions


def _channel_shape(x):
    return (1, -1) + (1,) * (x.dim() - 2)


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set):
        dims = [0] + list(range(2, x.dim()))
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        xc = x.to(compute)
        count = x.numel() // x.shape[1]
        mean = xc.mean(dims)
        var = xc.var(dims, unbiased=False) if count > 0 else torch.zeros_like(mean)
        local = torch.cat([torch.tensor([float(count)], dtype=compute, device=x.device), mean, var])
        everyone = functions.allgather(local.unsqueeze(0), process_set=process_set)
        counts, means, variances = everyone[:, :1], everyone[:, 1:1 + x.shape[1]], \
            everyone[:, 1 + x.shape[1]:]
        total = counts.sum()
        if total <= 0:
            raise error("ddp.torch.SyncBatchNorm: the batch is empty on every rank")
        g_mean = (counts * means).sum(0) / total
        g_var = (counts * (variances + (means - g_mean) ** 2)).sum(0) / total
        invstd = torch.rsqrt(g_var + eps)
        if running_mean is not None and momentum > 0:
            unbiased = g_var * (total / (total - 1)) if total > 1 else g_var
            running_mean.mul_(1 - momentum).add_(g_mean.to(running_mean.dtype), alpha=momentum)
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        shape = _channel_shape(x)
        xhat = (xc - g_mean.view(shape)) * invstd.view(shape)
        out = xhat
        if weight is not None:
            out = out * weight.to(compute).view(shape) + bias.to(compute).view(shape)
        ctx.save_for_backward(xc, weight, g_mean, invstd)
        ctx.total, ctx.process_set, ctx.dtype = total, process_set, x.dtype
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        xc, weight, mean, invstd = ctx.saved_tensors
        dims = [0] + list(range(2, xc.dim()))
        shape = _channel_shape(xc)
        g = grad.to(xc.dtype)
        xmu = xc - mean.view(shape)
        sum_dy = g.sum(dims)
        sum_dy_xmu = (g * xmu).sum(dims)
        grad_weight = grad_bias = None
        if weight is not None:
            grad_weight = (sum_dy_xmu * invstd).to(weight.dtype)
            grad_bias = sum_dy.to(weight.dtype)
        grad_input = None
        if ctx.needs_input_grad[0]:
            both = functions.allreduce(torch.cat([sum_dy, sum_dy_xmu]), op=ReduceOp.SUM,
                                       process_set=ctx.process_set)
            c = sum_dy.numel()
            mean_dy = (both[:c] / ctx.total).view(shape)
            mean_dy_xmu = (both[c:] / ctx.total).view(shape)
            scale = invstd.view(shape)
            if weight is not None:
                scale = scale * weight.to(xc.dtype).view(shape)
            grad_input = ((g - mean_dy - xmu * invstd.view(shape) ** 2 * mean_dy_xmu)
                          * scale).to(ctx.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):  # noqa: SLF001 - torch's own
    """Batch normalization over the whole batch across ranks (Horovod's SyncBatchNorm; works on
    CPU tensors too). Inputs of 2 or more dimensions (N, C, ...). In training, every rank
    normalizes with the mean and variance of all ranks' samples; in eval, or alone, it is
    torch's BatchNorm. `process_set` limits the statistics to some ranks."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=0):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):  # noqa: A002 - torch's name
        if input.dim() < 2:
            raise error(f"ddp.torch.SyncBatchNorm: expected an input of 2 or more dimensions "
                        f"(N, C, ...), got {input.dim()}")

    def forward(self, input):  # noqa: A002 - torch's name
        self._check_input_dim(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                      else self.momentum)
        else:
            factor = 0.0
        members = len(_ops.process_set_ranks(self.process_set)) if _ddp.is_initialized() else 1
        if not self.training or members == 1:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                                self.bias, self.training or not self.track_running_stats,
                                factor, self.eps)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, self.running_mean,
                                            self.running_var, self.eps, factor,
                                            self.process_set)
