"""Models and batches for `memplan capture`: torchvision's by name, a user's factory, a GPT block.

A model spec is `torchvision:NAME` (a torchvision classification model, e.g. `torchvision:resnet50`)
or `package.module:factory` (a function taking no arguments that returns an `nn.Module`).

The batch: a model with a `memplan_batch(batch_size, input_dims)` method makes its own (a tuple of
its inputs, then the target, which may itself be a tuple); any other model is taken for an image
classifier: a float32 image [batch, 3, H, W] from `--input HxW` and int64 class labels for
cross-entropy on its main output (torchvision's GoogLeNet and Inception v3 add their auxiliary
classifiers' outputs in training: the loss is the main classifier's, as in evaluation).
"""

import importlib
import math

import torch
from torch import nn
from torch.nn import functional as F


class SpecError(ValueError):
    """A model spec or an input that cannot be used (one line, for the command line)."""


def _function(module_name, attr, prefix=""):
    """The function `module_name.attr` (a `package.module:function` spec's); SpecError, its
    message after `prefix`, when the module does not import or has no such function."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise SpecError(f"{prefix}cannot import '{module_name}': {e}") from None
    function = getattr(module, attr, None)
    if function is None or not callable(function):
        raise SpecError(f"{prefix}'{module_name}' has no function '{attr}'")
    return function


def load_model(spec):
    if ":" not in spec:
        raise SpecError(f"model '{spec}' is not 'torchvision:NAME' or 'package.module:factory'")
    module_name, attr = spec.split(":", 1)
    if module_name == "torchvision":
        import torchvision
        factory = getattr(torchvision.models, attr, None)
        if factory is None or not callable(factory) or attr.startswith("_"):
            raise SpecError(f"torchvision has no model '{attr}'")
        return factory()
    model = _function(module_name, attr)()
    if not isinstance(model, nn.Module):
        raise SpecError(f"'{spec}' returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def compile_model(model, backend):
    """`torch.compile(model, backend=backend)` (`--compile`), or SpecError: no torch.compile in
    this PyTorch, or a backend it does not know."""
    if not hasattr(torch, "compile"):
        raise SpecError(f"--compile {backend}: torch.compile needs PyTorch 2.0 or later "
                        f"(this is {torch.__version__})")
    from torch._dynamo import list_backends
    if backend not in set(list_backends(exclude_tags=())) | {"inductor", "eager"}:
        raise SpecError(f"--compile {backend}: torch.compile has no backend '{backend}' "
                        "(torch._dynamo.list_backends(); memplan captures the splits of inductor, "
                        "aot_eager, aot_eager_decomp_partition and aot_eager_default_partitioner)")
    return torch.compile(model, backend=backend)


def load_step(spec):
    """The training step `package.module:function` names (`--step`): a callable
    `function(model, batch, loss_fn, optimizer)` returning the loss (memplan.torch.capture)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SpecError(f"--step '{spec}' is not 'package.module:function'")
    return _function(module_name, attr, "--step: ")


def parse_dims(text):
    try:
        dims = [int(d) for d in text.lower().split("x")]
    except ValueError:
        dims = []
    if not dims or any(d <= 0 for d in dims):
        raise SpecError(f"--input '{text}' is not positive extents like 224x224")
    return dims


def make_batch(model, batch_size, input_dims, device):
    """The batch for `model`: its own `memplan_batch`, or an image classifier's (module doc)."""
    if hasattr(model, "memplan_batch"):
        batch = model.memplan_batch(batch_size, input_dims)
    else:
        if len(input_dims) != 2:
            raise SpecError(f"--input {'x'.join(map(str, input_dims))}: an image model takes HxW")
        image = torch.randn(batch_size, 3, *input_dims)
        with torch.no_grad():
            classes = main_output(model.eval()(_to(image[:1], device))).shape[-1]
        model.train()
        batch = (image, torch.randint(0, classes, (batch_size,)))
    return tuple(_to(t, device) for t in batch)


def _to(value, device):
    """`value` (a tensor, or tuples, lists and dicts of them) on `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    return value


def main_output(output):
    """A classifier's main output: the output itself, the `logits` of torchvision's GoogLeNet and
    Inception v3 outputs in training (their auxiliary classifiers' beside it), or a tuple's
    first element."""
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, (tuple, list)) and output:
        return main_output(output[0])
    raise SpecError(f"the model returned a {type(output).__name__}, not the logits of a "
                    "classifier (give it memplan_loss(output, target))")


def classification_loss(output, target):
    """Cross-entropy of a classifier's main output (`main_output`) against class labels."""
    return F.cross_entropy(main_output(output), target)


def loss_of(model):
    """The loss function for `model`: its `memplan_loss` if it has one, else cross-entropy on its
    main output (`classification_loss`)."""
    return getattr(model, "memplan_loss", classification_loss)


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.c_attn(x).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(h // self.heads)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        probs = self.attn_dropout(F.softmax(scores, dim=-1))
        y = (probs @ v).transpose(1, 2).reshape(b, s, h)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, heads, dropout)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(),
                                 nn.Linear(4 * hidden, hidden), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """A GPT-2-style decoder as the zoo's `gpt` models it (zoo/transformer.cpp): token and position
    embeddings, pre-norm blocks, a final layer-norm and an LM head tied to the token embedding."""

    def __init__(self, layers=1, hidden=256, heads=4, sequence=128, vocab=1024, dropout=0.1):
        super().__init__()
        self.sequence, self.vocab = sequence, vocab
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(sequence, hidden)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(hidden, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.drop(self.wte(tokens) + self.wpe(positions))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)

    def memplan_batch(self, batch_size, input_dims):
        sequence = input_dims[0] if input_dims else self.sequence
        if len(input_dims) > 1 or sequence > self.sequence:
            raise SpecError(f"--input: a GPT takes a sequence length of at most {self.sequence}")
        tokens = torch.randint(0, self.vocab, (batch_size, sequence + 1))
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    @staticmethod
    def memplan_loss(logits, labels):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def gpt_block():
    """One GPT-2-style block with a 256-wide residual stream, 4 heads, 128 tokens, 1024 words."""
    return GPT(layers=1)


# ---- the user battery's other models (bench/torch-models.sh): what a PyTorch user trains besides
# image classifiers, each with its own batch and loss ----------------------------------------------

class RecurrentTagger(nn.Module):
    """A sequence tagger: embeddings, a 2-layer nn.LSTM or nn.GRU (batch first), a linear head
    per token (issue 36: the CPU cells write gates in place into chunks of one saved buffer)."""

    def __init__(self, cell, hidden=128, vocab=512, tags=16, sequence=32):
        super().__init__()
        self.sequence, self.vocab, self.tags = sequence, vocab, tags
        self.embed = nn.Embedding(vocab, hidden)
        self.rnn = cell(hidden, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, tags)

    def forward(self, tokens):
        return self.head(self.rnn(self.embed(tokens))[0])

    def memplan_batch(self, batch_size, input_dims):
        sequence = input_dims[0] if input_dims else self.sequence
        if len(input_dims) > 1:
            raise SpecError("--input: a sequence tagger takes a sequence length")
        return (torch.randint(0, self.vocab, (batch_size, sequence)),
                torch.randint(0, self.tags, (batch_size, sequence)))

    @staticmethod
    def memplan_loss(logits, tags):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tags.reshape(-1))


def lstm_tagger():
    return RecurrentTagger(nn.LSTM)


def gru_tagger():
    return RecurrentTagger(nn.GRU)


class SdpaAttention(CausalSelfAttention):
    """CausalSelfAttention through F.scaled_dot_product_attention (PyTorch 2.x's fused kernels)."""

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.c_attn(x).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.attn_dropout.p if self.training else 0)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, s, h)))


def gpt_sdpa_block():
    """gpt_block with scaled-dot-product attention (PyTorch 2.x: F.scaled_dot_product_attention)."""
    if not hasattr(F, "scaled_dot_product_attention"):
        raise SpecError("F.scaled_dot_product_attention needs PyTorch 2.0 or later")
    model = GPT(layers=1)
    for block in model.h:
        attention = SdpaAttention(256, 4, 0.1)
        attention.load_state_dict(block.attn.state_dict())
        block.attn = attention
    return model


def compiled_gpt_block():
    """gpt_block under torch.compile (inductor): captured, applied and validated as its
    AOTAutograd split (memplan.torch.compiled)."""
    if not hasattr(torch, "compile"):
        raise SpecError("torch.compile needs PyTorch 2.0 or later")
    return torch.compile(GPT(layers=1))


def compiled_resnet18():
    """torchvision's resnet18 under torch.compile (inductor): its split saves the channels-last
    copies of the convolution weights that inductor's layout optimisation makes on the CPU
    (memplan.torch.compiled)."""
    if not hasattr(torch, "compile"):
        raise SpecError("torch.compile needs PyTorch 2.0 or later")
    import torchvision
    return torch.compile(torchvision.models.resnet18())


def bf16_autocast_step(model, batch, loss_fn, optimizer):
    """A training step under CPU bf16 autocast (a `--step`): the forward pass and the loss in
    bfloat16 where autocast casts, backward and the update outside it."""
    *inputs, target = batch
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(model(*inputs), target)
    loss.backward()
    optimizer.step()
    return loss


class SsdLite(nn.Module):
    """torchvision's SSDlite (MobileNetV3-Large backbone, 320x320, 91 classes, no pretrained
    weights) in training: the batch is images and one box with its label per image, the loss the
    sum of the detector's losses."""

    def __init__(self):
        super().__init__()
        from torchvision.models.detection import ssdlite320_mobilenet_v3_large
        self.detector = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)

    def forward(self, images, boxes, labels):
        targets = [{"boxes": b.unsqueeze(0), "labels": l.unsqueeze(0)}
                   for b, l in zip(boxes, labels)]
        losses = self.detector(list(images), targets)
        return sum(losses.values())

    def memplan_batch(self, batch_size, input_dims):
        if len(input_dims) != 2:
            raise SpecError("--input: SSDlite takes HxW")
        h, w = input_dims
        corner = torch.rand(batch_size, 2) * 0.5
        size = torch.rand(batch_size, 2) * 0.4 + 0.1
        scale = torch.tensor([w, h, w, h], dtype=torch.float32)
        boxes = torch.cat([corner, corner + size], dim=1) * scale
        return torch.rand(batch_size, 3, h, w), boxes, torch.randint(1, 91, (batch_size,)), None

    @staticmethod
    def memplan_loss(loss, _target):
        return loss


def ssdlite():
    return SsdLite()
