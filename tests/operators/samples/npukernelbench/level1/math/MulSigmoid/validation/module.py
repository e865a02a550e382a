import torch
import torch_npu
import kernel_gen_ops


class Model(torch.nn.Module):
    def forward(self, x1, x2, t1, t2, t3):
        return torch.sigmoid(x1 * t1) * x2 * t2 + t3


class ModelNew(torch.nn.Module):
    def forward(self, x1, x2, t1, t2, t3):
        return kernel_gen_ops.mul_sigmoid(x1, x2, t1, t2, t3)
