"""Gist's encodings of a feature map, carried out on torch tensors (CPU or CUDA) by `apply`.

What: `encode_map(flat, scheme)` turns a float32 map (a flat tensor over its whole storage) into
what the device holds instead (`Encoded`), and `decode_map(encoded)` gives the flat float32 map
back, for the schemes a plan names: binarize (the sign, 1 bit a value, decoded to 1.0 / 0.0),
sparse (every value but +0.0 with its position: Note [Sparse format] in core/plan.hpp) and the
narrow floats fp16, fp10, fp8 (codes of 1 + exponent + mantissa bits, rounded as host_backend's
narrow_encode_value rounds: nearest, ties to even, subnormals, saturating).

Why here: the encoders must run where the map lives, on the step's own device, so they are torch
ops. What they must agree on with the simulator — each format's bits (sim::NarrowFormat), the
sparse block (sim::kSparseBlockValues) and the encoded buffer's size (sim::encoded_bytes, which
the simulator allocates) — comes from memplan._core, not from constants of our own. Scratch
tensors an encoder or decoder makes while it runs are not held (the simulator sizes the encoded
buffer only).
"""

import math

import torch

from memplan import _core

def _format(scheme):
    """(exponent bits, mantissa bits) of a narrow float (sim::NarrowFormat)."""
    return _core.narrow_format(scheme)


def encoded_bytes(scheme, values):
    """sim::encoded_bytes of a float32 map of `values` values under `scheme` (at least 1 byte):
    the bytes the simulator's encoded buffer has, and the bytes apply's encoded copy holds."""
    return _core.encoded_bytes(scheme, values)


def narrow_codes(x, scheme):
    """The codes (int32, low 1 + exponent + mantissa bits) of float32 `x` in a narrow float, as
    host_backend's narrow_encode_value writes them: round to nearest, ties to even, with
    subnormals; saturating at the largest finite value; infinities kept, NaN a quiet NaN."""
    exponent_bits, m = _format(scheme)
    bias = (1 << (exponent_bits - 1)) - 1
    exp_all_ones = (1 << exponent_bits) - 1
    width = 1 + exponent_bits + m
    min_exponent = 1 - bias
    bits = x.contiguous().view(torch.int32)
    magnitude = bits & 0x7FFFFFFF
    shift = 23 - m
    # The target's normal range: round float32's 23-bit mantissa to m bits (ties to even); a carry
    # moves into the exponent. Codes are the float32 exponent re-biased, then the mantissa.
    lsb = (magnitude >> shift) & 1
    rounded = (magnitude + ((1 << (shift - 1)) - 1) + lsb) >> shift
    code = rounded - ((127 - bias) << m)
    code = torch.clamp(code, max=((2 * bias) << m) | ((1 << m) - 1))  # saturate
    # Below its smallest normal value: multiples of 2^(min_exponent - m) (exact scalings); a value
    # that rounds up to the smallest normal one gets its code, 2^m, as well.
    tiny = magnitude < ((min_exponent + 127) << 23)
    small = torch.abs(x).clamp(max=2.0 ** min_exponent)  # (the others are not used)
    scaled = torch.round(small * 2.0 ** (m - min_exponent)).to(torch.int32)
    code = torch.where(tiny, scaled, code)
    code = torch.where(magnitude == 0x7F800000, torch.full_like(code, exp_all_ones << m), code)
    code = code | ((bits < 0).to(torch.int32) << (width - 1))
    nan = magnitude > 0x7F800000
    return torch.where(nan, torch.full_like(code, (exp_all_ones << m) | 1), code)


def narrow_values(code, scheme):
    """float32 values of narrow-float codes (int32), as narrow_decode_value reads them."""
    exponent_bits, m = _format(scheme)
    bias = (1 << (exponent_bits - 1)) - 1
    exp_all_ones = (1 << exponent_bits) - 1
    width = 1 + exponent_bits + m
    field = (code >> m) & exp_all_ones
    mantissa = code & ((1 << m) - 1)
    normal = (((field - bias + 127) << 23) | (mantissa << (23 - m))).view(torch.float32)
    subnormal = mantissa.to(torch.float32) * 2.0 ** (1 - bias - m)
    value = torch.where(field == 0, subnormal, normal)
    value = torch.where(field == exp_all_ones,
                        torch.where(mantissa == 0, torch.full_like(value, math.inf),
                                    torch.full_like(value, math.nan)), value)
    return torch.where(((code >> (width - 1)) & 1) == 1, -value, value)


def _pack_bits(codes, width):
    """`codes` (int32, `width` bits each) as host_backend's bit stream: value i in bits
    width*i .. width*i + width - 1, bit b in byte b / 8 at b % 8 (uint8, ceil(n * width / 8))."""
    n = codes.numel()
    per_group = 8 // math.gcd(width, 8)  # values per whole number of bytes
    group_bytes = per_group * width // 8
    padded = torch.zeros(-(-n // per_group) * per_group, dtype=torch.int64, device=codes.device)
    padded[:n] = codes
    shifts = torch.arange(per_group, device=codes.device) * width
    words = (padded.view(-1, per_group) << shifts).sum(1)
    stream = (words[:, None] >> (torch.arange(group_bytes, device=codes.device) * 8)) & 0xFF
    return stream.to(torch.uint8).flatten()[:(n * width + 7) // 8].clone()


def _unpack_bits(stream, width, n):
    per_group = 8 // math.gcd(width, 8)
    group_bytes = per_group * width // 8
    groups = -(-n // per_group)
    padded = torch.zeros(groups * group_bytes, dtype=torch.int64, device=stream.device)
    padded[:stream.numel()] = stream
    words = (padded.view(-1, group_bytes) << (torch.arange(group_bytes, device=stream.device)
                                               * 8)).sum(1)
    codes = (words[:, None] >> (torch.arange(per_group, device=stream.device) * width)) \
        & ((1 << width) - 1)
    return codes.flatten()[:n].to(torch.int32)


class Encoded:
    """A map's encoded copy: `held` (the device tensors it consists of, `nbytes` in all: the
    simulator's encoded buffer), `spilled` (a sparse encoding's bytes beyond its planned buffer,
    in host memory as host_backend spills them), and what decoding needs."""

    def __init__(self, scheme, values, device, held, spilled=None, meta=None):
        self.scheme, self.values, self.device = scheme, values, device
        self.held, self.spilled, self.meta = held, spilled, meta or {}
        self.nbytes = sum(t.numel() * t.element_size() for t in held)


def encode_map(flat, scheme):
    """Encodes float32 `flat` (1-D, a map's whole storage) under `scheme`."""
    n, device = flat.numel(), flat.device
    if scheme == "binarize":  # the sign only: 1 bit, 1.0 / 0.0 on decode (Gist binarize)
        return Encoded(scheme, n, device, [_pack_bits((flat > 0).to(torch.int32), 1)])
    if scheme == "sparse":
        # Note [Sparse format]: per block of SPARSE_BLOCK_VALUES values a 16-bit count, per stored
        # value (all but +0.0, so -0.0 comes back) an 8-bit index in its block and the float32
        # value; laid out here as the counts, then the indices, then the values. The planned
        # buffer holds the first encoded_bytes("sparse", n) bytes of that; a denser map's rest
        # spills to the host, as host_backend's sparse_encode_spilling does.
        block_values = _core.SPARSE_BLOCK_VALUES
        stored = (flat.view(torch.int32) != 0)
        blocks = -(-n // block_values)
        mask = torch.zeros(blocks * block_values, dtype=torch.bool, device=device)
        mask[:n] = stored
        counts = mask.view(blocks, block_values).sum(1).to(torch.int16)
        where = stored.nonzero().flatten()
        stream = torch.cat([counts.view(torch.uint8), (where % block_values).to(torch.uint8),
                            flat[where].view(torch.uint8)])
        capacity = encoded_bytes("sparse", n)
        buffer = torch.zeros(capacity, dtype=torch.uint8, device=device)
        kept = min(capacity, stream.numel())
        buffer[:kept] = stream[:kept]
        spilled = stream[capacity:].to("cpu", copy=True) if stream.numel() > capacity else None
        return Encoded(scheme, n, device, [buffer], spilled,
                       {"blocks": blocks, "stored": where.numel(), "total": stream.numel()})
    exponent, mantissa = _format(scheme)
    codes = narrow_codes(flat, scheme)
    width = 1 + exponent + mantissa
    packed = codes.to(torch.uint8) if width == 8 else _pack_bits(codes, width)
    return Encoded(scheme, n, device, [packed])


def decode_map(encoded):
    """The flat float32 map `encoded` stands for."""
    n, device = encoded.values, encoded.device
    if encoded.scheme == "binarize":
        return _unpack_bits(encoded.held[0], 1, n).to(torch.float32)
    if encoded.scheme == "sparse":
        meta = encoded.meta
        stream = encoded.held[0][:meta["total"]]
        if encoded.spilled is not None:
            stream = torch.cat([stream, encoded.spilled.to(device)])
        blocks, stored = meta["blocks"], meta["stored"]
        counts = stream[:2 * blocks].clone().view(torch.int16).to(torch.int64)
        index = stream[2 * blocks:2 * blocks + stored].to(torch.int64)
        values = stream[2 * blocks + stored:].clone().view(torch.float32)
        block = torch.repeat_interleave(torch.arange(blocks, device=device), counts)
        flat = torch.zeros(n, dtype=torch.float32, device=device)
        flat[block * _core.SPARSE_BLOCK_VALUES + index] = values
        return flat
    exponent, mantissa = _format(encoded.scheme)
    width = 1 + exponent + mantissa
    packed = encoded.held[0]
    codes = packed.to(torch.int32) if width == 8 else _unpack_bits(packed, width, n)
    return narrow_values(codes, encoded.scheme)
