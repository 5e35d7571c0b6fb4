"""The recurrent transformer: one pre-LayerNorm block applied ``n_recur`` times with shared weights.

Tokens and positions are learned embeddings; the block is causal self-attention (``n_head`` heads)
followed by an MLP ``mlp_ratio`` times wider, each added to the residual stream; a final LayerNorm
and a linear head give next-token logits. Size is set by ``d_model``. Dimension names in shape
comments: B batch, T time, D d_model, H heads, K head size, V vocabulary.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from threshold.config import MAX_D_MODEL, ModelConfig, param_count

__all__ = ["MAX_D_MODEL", "ModelConfig", "RecurrentTransformer", "param_count"]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.qkv_bias)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape  # (B, T, D)
        q, k, v = self.qkv(x).split(d, dim=2)  # (B, T, D) each
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        # q, k, v: (B, H, T, K)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, K)
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.parallel:  # both read the same x
            return x + self.attn(self.ln_1(x)) + self.mlp(self.ln_2(x))  # (B, T, D)
        x = x + self.attn(self.ln_1(x))  # (B, T, D)
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

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Next-token logits (B, T, V) for tokens ``idx`` (B, T). Training and decoding run on
        the stacked form (:class:`threshold.train.ensemble.Ensemble`, with its KV cache); this
        forward is the reference it is checked against and what the analyses hook into."""
        t = idx.shape[1]
        if t > self.cfg.n_ctx:
            raise ValueError(f"sequence of {t} tokens exceeds n_ctx {self.cfg.n_ctx}")
        pos = torch.arange(t, device=idx.device)  # (T,)
        x = self.tok(idx) + self.pos(pos)  # (B, T, D)
        for _ in range(self.cfg.n_recur):
            x = self.block(x)  # (B, T, D)
        return self.head(self.ln_f(x))  # (B, T, V)

    def num_params(self) -> dict[str, int]:
        """Parameters counted on the module itself (for checking :func:`param_count`)."""
        total = sum(p.numel() for p in self.parameters())
        outside = self.tok.weight.numel() + self.pos.weight.numel()
        if not self.cfg.tie_embeddings:
            outside += self.head.weight.numel()
        return {"total": total, "non_embedding": total - outside}
