"""The small models and batches the tests of today's policies run (test_todays_policies.py against
PyTorch's checkpointing, test_torchtune_offloading.py against torchtune): a 4-layer GPT, torchvision's
ResNet-18, ResNet-50, MobileNetV2 and ViT at sizes a test runs."""
import torch
import torchvision
from torch.nn import functional as F

from memplan.torch.models import GPT


def gpt():
    return GPT(layers=4, hidden=64, heads=4, sequence=32, vocab=128, dropout=0.0)


def gpt_batch(model):
    torch.manual_seed(1)
    return model.memplan_batch(2, [32]), model.memplan_loss


def resnet():
    return torchvision.models.resnet18(num_classes=10)


def resnet_batch(model):
    torch.manual_seed(1)
    return (torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))), F.cross_entropy


def resnet50():
    return torchvision.models.resnet50(num_classes=10)


def mobilenet():
    return torchvision.models.mobilenet_v2(num_classes=10)


def vit():
    """torchvision's ViT (vit_b_16's code) at a size a test runs: 32x32 images in 8x8 patches,
    2 encoder blocks 64 wide with 2 heads (nn.MultiheadAttention)."""
    return torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                                num_heads=2, hidden_dim=64, mlp_dim=128,
                                                num_classes=10)


def mobilenet_small():
    """torchvision's MobileNetV2 code, small enough to compile in seconds (the memory-budget
    partitioner's tests): a quarter of its width and three of its seven stages (five inverted
    residual blocks, one with a residual), then its 1x1 convolution to 1,280 channels."""
    stages = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2]]  # expansion, channels, blocks, stride
    return torchvision.models.mobilenet_v2(num_classes=10, width_mult=0.25,
                                           inverted_residual_setting=stages)
