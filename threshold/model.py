"""The recurrent transformer: one pre-LayerNorm block applied ``n_recur`` times with shared weights.

Tokens and positions are learned embeddings; the block is causal self-attention (``n_head`` heads)
followed by an MLP ``mlp_ratio`` times wider, each added to the residual stream; a final LayerNorm
and a linear head give next-token logits. Size is set by ``d_model``. Dimension names in shape
comments: B batch, T time (new tokens), S time seen so far (cache), D d_model, H heads, K head size,
V vocabulary, R recurrence steps.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from threshold.config import MAX_D_MODEL, ModelConfig, param_count

__all__ = ["MAX_D_MODEL", "KVCache", "ModelConfig", "RecurrentTransformer", "param_count"]


class KVCache:
    """Keys and values of every recurrence step, for decoding one token at a time."""

    def __init__(self, cfg: ModelConfig, batch: int, device=None, dtype=torch.float32) -> None:
        shape = (cfg.n_recur, batch, cfg.n_head, cfg.n_ctx, cfg.d_model // cfg.n_head)
        self.k = torch.zeros(shape, device=device, dtype=dtype)  # (R, B, H, n_ctx, K)
        self.v = torch.zeros(shape, device=device, dtype=dtype)  # (R, B, H, n_ctx, K)
        self.length = 0  # positions filled; the same for every step

    def update(self, step: int, k: torch.Tensor, v: torch.Tensor):
        t = k.shape[2]
        end = self.length + t
        self.k[step, :, :, self.length : end] = k  # k: (B, H, T, K)
        self.v[step, :, :, self.length : end] = v
        return self.k[step, :, :, :end], self.v[step, :, :, :end]  # (B, H, S, K) each


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.qkv_bias)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, cache: KVCache | None, step: int) -> torch.Tensor:
        b, t, d = x.shape  # (B, T, D)
        q, k, v = self.qkv(x).split(d, dim=2)  # (B, T, D) each
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        # q, k, v: (B, H, T, K)
        causal = True
        if cache is not None:
            causal = cache.length == 0  # prefill is causal; one new token attends to all before it
            if not causal and t != 1:
                raise ValueError("with a filled cache, feed one token at a time")
            k, v = cache.update(step, k, v)  # (B, H, S, K)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, H, T, K)
        return self.out(y.transpose(1, 2).reshape(b, t, d))  # (B, T, D)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.down = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)
        self.relu = cfg.activation == "relu"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)  # (B, T, mlp_ratio * D)
        return self.down(F.relu(h) if self.relu else F.gelu(h))  # (B, T, D)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)
        self.parallel = cfg.block == "parallel"

    def forward(self, x: torch.Tensor, cache: KVCache | None, step: int) -> torch.Tensor:
        if self.parallel:  # both read the same x
            return x + self.attn(self.ln_1(x), cache, step) + self.mlp(self.ln_2(x))  # (B, T, D)
        x = x + self.attn(self.ln_1(x), cache, step)  # (B, T, D)
        return x + self.mlp(self.ln_2(x))  # (B, T, D)


class RecurrentTransformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.block = Block(cfg)
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.tok.weight
        self._init_weights()

    def _init_weights(self) -> None:
        # Fan-in scaling keeps activations of order one at every d_model from 8 to 256; the two maps
        # that write into the residual stream are shrunk by the number of times they are applied.
        # With init_std, every matrix and embedding is N(0, init_std) instead (the group's code).
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln" in name:
                nn.init.ones_(p)
            elif self.cfg.init_std is not None:
                nn.init.normal_(p, std=self.cfg.init_std)
            elif name in ("tok.weight", "pos.weight"):
                nn.init.normal_(p, std=1.0)
            else:
                std = 1.0 / math.sqrt(p.shape[1])
                if name.endswith(("attn.out.weight", "mlp.down.weight")):
                    std /= math.sqrt(2 * self.cfg.n_recur)
                nn.init.normal_(p, std=std)

    def forward(self, idx: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Next-token logits (B, T, V) for tokens ``idx`` (B, T), continuing ``cache`` if given."""
        start = 0 if cache is None else cache.length
        t = idx.shape[1]
        if start + t > self.cfg.n_ctx:
            raise ValueError(f"sequence of {start + t} tokens exceeds n_ctx {self.cfg.n_ctx}")
        pos = torch.arange(start, start + t, device=idx.device)  # (T,)
        x = self.tok(idx) + self.pos(pos)  # (B, T, D)
        for step in range(self.cfg.n_recur):
            x = self.block(x, cache, step)  # (B, T, D)
        if cache is not None:
            cache.length += t
        return self.head(self.ln_f(x))  # (B, T, V)

    def num_params(self) -> dict[str, int]:
        """Parameters counted on the module itself (for checking :func:`param_count`)."""
        total = sum(p.numel() for p in self.parameters())
        outside = self.tok.weight.numel() + self.pos.weight.numel()
        if not self.cfg.tie_embeddings:
            outside += self.head.weight.numel()
        return {"total": total, "non_embedding": total - outside}
