"""Models and data shared by the tests' worker scripts and the tests."""

import torch

FEATURES, CLASSES = 12, 4


class Small(torch.nn.Module):
    """A small EXTERNAL model: two linear layers."""

    def __init__(self, hidden=16):
        super().__init__()
        self.fc1 = torch.nn.Linear(FEATURES, hidden)
        self.fc2 = torch.nn.Linear(hidden, CLASSES)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def synthetic(samples, seed=1):
    """Separable data: the class is the argmax of the first features,
    weighted."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, FEATURES, generator=g)
    y = (x[:, :CLASSES] * torch.arange(1, CLASSES + 1)).argmax(1)
    return x, y


def accuracy(module, x, y):
    with torch.no_grad():
        return (module(x).argmax(1) == y).float().mean().item()
