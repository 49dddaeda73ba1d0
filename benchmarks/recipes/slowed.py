"""resnet18 with a deliberate slowdown, for ``benchmarks/bench_compare.py``.

``resnet18_slowed(extra_blocks=1)`` is torchvision's resnet18 with one more BasicBlock (64 -> 64 channels)
after ``layer1``, added to the features with a small weight: 2 x 3x3 convolutions at the stride-4 resolution,
about 12.7% of the model's multiply-adds at any input size (9.4 M each of 148 M at 64x64), so about a 10%
slower model at every batch size, in every variant (tensor work that tracing, scripting, freezing, ONNX and
OpenVINO keep; a ``time.sleep`` would vanish from all but eager). ``extra_blocks=0`` computes exactly resnet18.
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn
from torchvision.models.resnet import BasicBlock


class Slowed(nn.Module):
    def __init__(self, base: torchvision.models.ResNet, extra_blocks: int) -> None:
        super().__init__()
        self.base = base
        self.extra = nn.Sequential(*[BasicBlock(64, 64) for _ in range(extra_blocks)])
        self.has_extra = extra_blocks > 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.base
        f = b.layer1(b.maxpool(b.relu(b.bn1(b.conv1(x)))))
        if self.has_extra:
            f = f + 1e-3 * self.extra(f)
        f = b.layer4(b.layer3(b.layer2(f)))
        return b.fc(torch.flatten(b.avgpool(f), 1))


def resnet18_slowed(num_classes: int = 10, extra_blocks: int = 1) -> nn.Module:
    return Slowed(torchvision.models.resnet18(num_classes=num_classes), extra_blocks)
