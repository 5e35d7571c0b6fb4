"""Many recurrent transformers as one: weights stacked per member, zero-padded to the largest d.

Member m of size ``d_m`` keeps each weight of its own :class:`RecurrentTransformer` in the leading
corner of a stacked tensor whose feature size is the largest member's ``D``; everything beyond
``d_m`` is zero. LayerNorm takes its statistics over the member's own ``d_m`` features and has zero
gain and bias beyond them, attention scales by the member's own ``1/sqrt(d_m)``, and GELU(0) = 0,
so the padding of the residual stream, of every activation and of every gradient stays exactly
zero: each member computes what its own model computes, and training one member never touches
another. One batched matmul per layer replaces a model-sized matmul per member, which is what
makes many tiny models cheap (their single-model steps are mostly per-call overhead).

Only the shape the domain fixes is supported: one head, untied head; members share vocabulary,
context, recurrence steps and MLP ratio. Dimension names: M members, B batch, T time (new tokens),
S time seen so far (cache), D padded d_model, F padded MLP width, V vocabulary, C context.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from threshold.errors import ConfigError
from threshold.model import ModelConfig, RecurrentTransformer
from threshold.train.layout import Rows

__all__ = ["Ensemble", "EnsembleCache", "check_members", "shape_key"]

LN_EPS = 1e-5  # nn.LayerNorm's default
# stacked name -> (the member's state-dict key, whether nn.Linear stores it transposed, and what
# each dimension of the (transposed) member tensor is: "d" model width, "qkv" three blocks of d,
# "mlp" mlp_ratio * d, "fixed" vocabulary or context)
_LAYOUT = {
    "tok": ("tok.weight", False, ("fixed", "d")),  # (M, V, D)
    "pos": ("pos.weight", False, ("fixed", "d")),  # (M, C, D)
    "ln_1.w": ("block.ln_1.weight", False, ("d",)),  # (M, D)
    "ln_1.b": ("block.ln_1.bias", False, ("d",)),
    "qkv.w": ("block.attn.qkv.weight", True, ("d", "qkv")),  # (M, D, 3D): q, k, v D columns each
    "qkv.b": ("block.attn.qkv.bias", False, ("qkv",)),  # (M, 3D)
    "out.w": ("block.attn.out.weight", True, ("d", "d")),  # (M, D, D)
    "out.b": ("block.attn.out.bias", False, ("d",)),
    "ln_2.w": ("block.ln_2.weight", False, ("d",)),
    "ln_2.b": ("block.ln_2.bias", False, ("d",)),
    "up.w": ("block.mlp.up.weight", True, ("d", "mlp")),  # (M, D, F)
    "up.b": ("block.mlp.up.bias", False, ("mlp",)),  # (M, F)
    "down.w": ("block.mlp.down.weight", True, ("mlp", "d")),  # (M, F, D)
    "down.b": ("block.mlp.down.bias", False, ("d",)),
    "ln_f.w": ("ln_f.weight", False, ("d",)),
    "ln_f.b": ("ln_f.bias", False, ("d",)),
    "head.w": ("head.weight", True, ("d", "fixed")),  # (M, D, V)
}


def _layout(cfg: ModelConfig) -> dict:
    """The stacked weights of models with ``cfg``: no q/k/v bias when the config has none."""
    return {k: v for k, v in _LAYOUT.items() if cfg.qkv_bias or k != "qkv.b"}


DECAYED = ("tok", "pos", "qkv.w", "out.w", "up.w", "down.w", "head.w")  # matrices: AdamW's decay


def shape_key(cfg: ModelConfig) -> tuple:
    """Models whose configs share this key can be stacked into one ensemble."""
    return tuple((k, v) for k, v in cfg.to_dict().items() if k != "d_model")


def check_members(cfgs: list[ModelConfig]) -> None:
    """Refuse configs the padded ensemble cannot stack (the message names the field)."""
    for cfg in cfgs:
        if cfg.n_head != 1 or cfg.tie_embeddings:
            raise ConfigError(
                f"batched training needs n_head 1 and an untied head (got n_head {cfg.n_head}, "
                f"tie_embeddings {cfg.tie_embeddings}): train this model on its own"
            )
    if len({shape_key(c) for c in cfgs}) > 1:
        raise ConfigError("members of one ensemble must share every model setting but d_model")


def _slots(dims: tuple[str, ...], d: int, width: int, r: int) -> list[tuple[slice, ...]]:
    """Where a member of size ``d`` sits in a tensor padded to ``width``: one index per block."""
    per_dim = []
    for kind in dims:
        if kind == "qkv":  # three blocks of d, at 0, width and 2 * width
            per_dim.append([slice(i * width, i * width + d) for i in range(3)])
        else:
            per_dim.append([{"d": slice(0, d), "mlp": slice(0, r * d), "fixed": slice(None)}[kind]])
    return list(itertools.product(*per_dim))


def _copy(
    dst: torch.Tensor,
    dst_width: int,
    src: torch.Tensor,
    src_width: int,
    d: int,
    dims: tuple[str, ...],
    r: int,
) -> None:
    """Copy the size-``d`` member held in ``src`` (padded to ``src_width``) into ``dst``."""
    lead = (slice(None),) * (dst.dim() - len(dims))  # the members dimension, if any
    with torch.no_grad():
        for a, b in zip(_slots(dims, d, dst_width, r), _slots(dims, d, src_width, r), strict=True):
            dst[lead + a] = src[lead + b]


def _size(dims: tuple[str, ...], shape: torch.Size, width: int, r: int) -> tuple[int, ...]:
    sizes = {"d": width, "qkv": 3 * width, "mlp": r * width}
    return tuple(sizes.get(kind, n) for kind, n in zip(dims, shape, strict=True))


@dataclass
class EnsembleCache:
    """Keys and values of every member and recurrence step, for decoding one token at a time."""

    k: torch.Tensor  # (R, M, B, C, D)
    v: torch.Tensor  # (R, M, B, C, D)
    length: int = 0  # positions filled; the same for every member and step

    @classmethod
    def empty(cls, ens: Ensemble, batch: int) -> EnsembleCache:
        c = ens.cfg
        shape = (c.n_recur, ens.n_members, batch, c.n_ctx, ens.width)
        zeros = torch.zeros(shape, device=ens.device)
        return cls(zeros, zeros.clone())


class Ensemble:
    """Stacked, padded weights of ``len(d_models)`` members and the forward pass over all of them.

    Every weight lives in one buffer ``flat`` (M, P), and every gradient in ``grad`` (M, P): the
    tensors of ``params`` are views of the first (leaves that require grad) whose ``.grad`` are
    views of the second, so backward fills ``grad`` in place and an optimizer updates all weights
    of all members in a dozen whole-buffer operations instead of a dozen per tensor.
    """

    def __init__(self, cfg: ModelConfig, d_models: list[int], params: dict[str, torch.Tensor]):
        self.cfg = cfg  # the shared settings; its d_model is the padded width D
        self.d_models = list(d_models)
        m = len(d_models)
        self.shapes = {name: p.shape[1:] for name, p in params.items()}
        self.flat = torch.cat([p.detach().reshape(m, -1) for p in params.values()], 1)  # (M, P)
        self.grad = torch.zeros_like(self.flat)  # (M, P)
        self.params = self.unflatten(self.flat)
        for p, g in zip(self.params.values(), self.unflatten(self.grad).values(), strict=True):
            p.requires_grad_()
            p.grad = g
        self.decayed = torch.cat(
            [torch.full((p[0].numel(),), float(n in DECAYED)) for n, p in params.items()]
        ).to(self.flat.device)  # (P,): 1 where AdamW decays the weight
        device = self.flat.device
        d = torch.tensor(self.d_models, dtype=torch.float32, device=device)  # (M,)
        feature = torch.arange(self.width, device=device)  # (D,)
        self.mask = (feature[None, :] < d[:, None]).float()[:, None, None, :]  # (M, 1, 1, D)
        self.inv_d = (1.0 / d)[:, None, None, None]  # (M, 1, 1, 1)
        self.q_scale = d.rsqrt()[:, None, None, None]  # (M, 1, 1, 1): each member's 1/sqrt(d_m)
        # Every member as wide as the stack: no padding, so torch's fused LayerNorm and the
        # attention's own scale serve (a third faster on CPU than the masked forms).
        self.uniform = len(set(self.d_models)) == 1
        # (sublayer, step) pairs whose output is replaced by zeros: the layer-usage ablation
        self.zeroed: frozenset[tuple[str, int]] = frozenset()

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of a buffer laid out like :attr:`flat` (M, P), one per weight, stacked shapes."""
        out, start = {}, 0
        for name, shape in self.shapes.items():
            size = shape.numel()
            out[name] = flat[:, start : start + size].view(flat.shape[0], *shape)
            start += size
        return out

    @property
    def n_members(self) -> int:
        return len(self.d_models)

    @property
    def width(self) -> int:
        return self.cfg.d_model

    @property
    def device(self) -> torch.device:
        return self.params["tok"].device

    @classmethod
    def from_models(cls, models: list[RecurrentTransformer], device="cpu") -> Ensemble:
        cfgs = [m.cfg for m in models]
        check_members(cfgs)
        width = max(c.d_model for c in cfgs)
        cfg, r = replace(cfgs[0], d_model=width), cfgs[0].mlp_ratio
        params = {}
        for name, (key, transposed, dims) in _layout(cfg).items():
            stacked = None
            for i, (model, c) in enumerate(zip(models, cfgs, strict=True)):
                t = model.state_dict()[key].detach()
                t = t.T if transposed else t
                if stacked is None:
                    stacked = torch.zeros((len(models), *_size(dims, t.shape, width, r)))
                _copy(stacked[i], width, t, c.d_model, c.d_model, dims, r)
            params[name] = stacked.to(device)
        return cls(cfg, [c.d_model for c in cfgs], params)

    def member(self, i: int) -> RecurrentTransformer:
        """Member ``i`` as its own model, on the CPU."""
        d, r = self.d_models[i], self.cfg.mlp_ratio
        with torch.random.fork_rng(devices=[]):  # its init is overwritten: leave the RNG be
            model = RecurrentTransformer(replace(self.cfg, d_model=d))
        state = {}
        for name, (key, transposed, dims) in _layout(self.cfg).items():
            like = model.state_dict()[key]
            out = torch.empty_like(like.T if transposed else like)
            _copy(out, d, self.params[name][i].detach().cpu(), self.width, d, dims, r)
            state[key] = out.T if transposed else out
        model.load_state_dict(state)
        return model

    def select(self, members: list[int]) -> Ensemble:
        """A new ensemble of the given members (copies; the width shrinks to the largest left)."""
        d_models = [self.d_models[i] for i in members]
        width = max(d_models)
        params = self.select_like(self.params, members, width)
        return Ensemble(replace(self.cfg, d_model=width), d_models, params)

    def select_like(
        self, tensors: dict[str, torch.Tensor], members: list[int], width: int
    ) -> dict[str, torch.Tensor]:
        """Tensors laid out like :attr:`params` (optimizer state) cut to ``members``, ``width``."""
        index = torch.tensor(members, device=self.device)
        out = {}
        for name, p in tensors.items():
            part = p.detach().index_select(0, index)  # (M', ...)
            if width < self.width:
                dims, r = _LAYOUT[name][2], self.cfg.mlp_ratio
                narrow = part.new_zeros((len(members), *_size(dims, part.shape[1:], width, r)))
                _copy(narrow, width, part, self.width, width, dims, r)
                part = narrow
            out[name] = part
        return out

    def put_member(self, dst: torch.Tensor, i: int, tensors: dict[str, torch.Tensor]) -> None:
        """Write member ``i``'s ``tensors`` (laid out like a one-member ensemble of its own width,
        as :meth:`select_like` cuts them) into ``dst``, a buffer laid out like :attr:`flat`."""
        views, d, r = self.unflatten(dst), self.d_models[i], self.cfg.mlp_ratio
        for name, t in tensors.items():
            _copy(views[name][i], self.width, t[0].to(dst.device), d, d, _LAYOUT[name][2], r)

    def forward(
        self, idx: torch.Tensor, cache: EnsembleCache | None = None, rows: Rows | None = None
    ) -> torch.Tensor:
        """Next-token logits (M, B, T, V) of every member for its tokens ``idx`` (M, B, T), one
        sequence a row from position 0 (or ``cache.length``). With ``rows``, ``idx`` is a flat
        layout (M, 1, N) of many sequences, each token at the position ``rows.pos`` gives it,
        and attention reads each sequence alone (:mod:`threshold.train.layout`)."""
        p, cfg = self.params, self.cfg
        t = idx.shape[2]
        start = 0 if cache is None else cache.length
        if rows is None and start + t > cfg.n_ctx:
            raise ValueError(f"sequence of {start + t} tokens exceeds n_ctx {cfg.n_ctx}")
        x = self._embed(idx, p["tok"])  # (M, B, T, D)
        if rows is None:
            x = x + p["pos"][:, None, start : start + t]  # (M, B, T, D)
        else:
            x = x + self._embed(rows.pos, p["pos"])  # (M, 1, N, D)
        for step in range(cfg.n_recur):
            if cfg.block == "parallel":  # both read the same x
                attn = self._attention(self._ln(x, "ln_1"), cache, step, rows)  # (M, B, T, D)
                x = x + self._kept(attn, "attn", step) + self._kept(self._mlp_of(x), "mlp", step)
                continue
            attn = self._attention(self._ln(x, "ln_1"), cache, step, rows)  # (M, B, T, D)
            x = x + self._kept(attn, "attn", step)  # (M, B, T, D)
            x = x + self._kept(self._mlp_of(x), "mlp", step)  # (M, B, T, D)
        if cache is not None:
            cache.length += t
        return self._linear(self._ln(x, "ln_f"), "head.w", None)  # (M, B, T, V)

    __call__ = forward

    @staticmethod
    def _embed(idx: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """Rows of each member's own ``table`` (M, V, D) at ``idx`` (M, B, T): (M, B, T, D)."""
        m, v = table.shape[:2]
        offsets = torch.arange(m, device=idx.device)[:, None, None] * v  # (M, 1, 1)
        return F.embedding(idx + offsets, table.reshape(m * v, -1))  # (M, B, T, D)

    def _kept(self, update: torch.Tensor, sublayer: str, step: int) -> torch.Tensor:
        """``update``, or zeros where the ablation zeroes this sublayer at this step."""
        return torch.zeros_like(update) if (sublayer, step) in self.zeroed else update

    def _mlp_of(self, x: torch.Tensor) -> torch.Tensor:
        return self._mlp(self._ln(x, "ln_2"))  # (M, B, T, D)

    def _ln(self, x: torch.Tensor, name: str) -> torch.Tensor:
        w = self.params[f"{name}.w"][:, None, None, :]  # (M, 1, 1, D)
        b = self.params[f"{name}.b"][:, None, None, :]
        if self.uniform:
            return torch.addcmul(b, F.layer_norm(x, (self.width,), eps=LN_EPS), w)
        # the padding of x is zero, but masked here too so that no gradient reaches it
        mean = (x * self.mask).sum(-1, keepdim=True) * self.inv_d  # (M, B, T, 1)
        centred = (x - mean) * self.mask  # (M, B, T, D): zero beyond each member's d
        var = centred.square().sum(-1, keepdim=True) * self.inv_d  # (M, B, T, 1)
        return centred * torch.rsqrt(var + LN_EPS) * w + b  # (M, B, T, D)

    def _linear(self, x: torch.Tensor, weight: str, bias: str | None) -> torch.Tensor:
        m, b, t, _ = x.shape
        flat = x.reshape(m, b * t, -1)  # (M, B*T, in)
        w = self.params[weight]  # (M, in, out)
        if bias is None:
            y = torch.bmm(flat, w)  # (M, B*T, out)
        else:
            y = torch.baddbmm(self.params[bias][:, None, :], flat, w)  # (M, B*T, out)
        return y.view(m, b, t, -1)

    def _attention(
        self, x: torch.Tensor, cache: EnsembleCache | None, step: int, rows: Rows | None
    ) -> torch.Tensor:
        bias = "qkv.b" if self.cfg.qkv_bias else None
        qkv = self._linear(x, "qkv.w", bias)  # (M, B, T, 3D)
        if rows is not None:  # flat (M, 1, N, 3D) to one sequence a row
            qkv = rows.to_rows(qkv)  # (M, B, T, 3D)
        q, k, v = qkv.split(self.width, dim=-1)  # (M, B, T, D) each
        scale = self.width**-0.5
        if not self.uniform:
            q, scale = q * self.q_scale, 1.0  # the member's own 1/sqrt(d); the padding is zero
        causal = True
        if cache is not None:
            causal = cache.length == 0  # prefill is causal; one new token attends to all before it
            if not causal and q.shape[2] != 1:
                raise ValueError("with a filled cache, feed one token at a time")
            end = cache.length + q.shape[2]
            cache.k[step, :, :, cache.length : end] = k
            cache.v[step, :, :, cache.length : end] = v
            k, v = cache.k[step, :, :, :end], cache.v[step, :, :, :end]  # (M, B, S, D)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)  # (M, B, T, D)
        if rows is not None:
            y = rows.to_flat(y)  # (M, 1, N, D)
        return self._linear(y, "out.w", "out.b")  # (M, B, T, D)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        h = self._linear(x, "up.w", "up.b")  # (M, B, T, F)
        h = F.relu(h) if self.cfg.activation == "relu" else F.gelu(h)  # both keep zero at zero
        return self._linear(h, "down.w", "down.b")  # (M, B, T, D)
