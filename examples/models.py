#!/usr/bin/python3
"""Two small decoder-only language models for fuyou-compile's examples and e2e tests.

Both take ``forward(idx, targets) -> loss`` with int64 [B, T] inputs and return the scalar mean
cross-entropy, so that an ONNX export of ``forward`` is the model's forward pass plus loss.

- ``GPT``: GPT-2 / nanoGPT shape (learned positions, pre-LN, fused qkv, GELU MLP, tied head).
- ``Llama``: RMSNorm, RoPE, SwiGLU, no biases, untied head.

Buffers (causal mask, positions, RoPE tables) are registered buffers so that they export as ONNX
initializers; ``frozen_buffer_names`` lists them for the ``fuyou.frozen`` metadata key.
"""
import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class ModelConfig:
    model: str = "gpt2"        # "gpt2" or "llama"
    vocab_size: int = 256      # byte tokens
    n_layer: int = 2
    n_head: int = 2
    d_model: int = 64
    block_size: int = 32
    tie_embeddings: bool = True   # gpt2 only; llama is always untied
    gelu: str = "tanh"            # gpt2 only: "tanh" or "erf"
    ffn_mult: int = 4             # gpt2 MLP hidden = ffn_mult * d_model
    ffn_hidden: int = 0           # llama MLP hidden; 0 = 8/3 * d_model rounded up to 32
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    dropout: float = 0.0          # every dropout's rate in training (evaluation turns it off)

    def to_dict(self):
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d):
        fields = {f.name for f in dataclasses.fields(ModelConfig)}
        return ModelConfig(**{k: v for k, v in d.items() if k in fields})


# ----------------------------------------------------------------------------------------------
# GPT-2


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.d_model % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.d_model = cfg.d_model
        self.head_dim = cfg.d_model // cfg.n_head
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        T = cfg.block_size
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.size()
        hd = self.head_dim
        q, k, v = self.c_attn(x).split(self.d_model, dim=2)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class GPTMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, cfg.ffn_mult * cfg.d_model)
        self.gelu = nn.GELU(approximate="tanh" if cfg.gelu == "tanh" else "none")
        self.c_proj = nn.Linear(cfg.ffn_mult * cfg.d_model, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class GPTBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = GPTMLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.d_model),
            wpe=nn.Embedding(cfg.block_size, cfg.d_model),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList([GPTBlock(cfg) for _ in range(cfg.n_layer)]),
            ln_f=nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps),
        ))
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.transformer.wte.weight
        self.register_buffer("pos", torch.arange(cfg.block_size, dtype=torch.long))
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.size()
        tok = self.transformer.wte(idx)
        pos = self.transformer.wpe(self.pos[:T])
        x = self.transformer.drop(tok + pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# ----------------------------------------------------------------------------------------------
# Llama


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    x1 = x[..., :h]
    x2 = x[..., h:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.d_model % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.head_dim = cfg.d_model // cfg.n_head
        self.wq = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.wk = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.wv = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.wo = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.attn_dropout = nn.Dropout(cfg.dropout)
        T = cfg.block_size
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x, cos, sin):
        B, T, C = x.size()
        hd = self.head_dim
        q = self.wq(x).view(B, T, self.n_head, hd).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_head, hd).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_head, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.wo(y)


def llama_ffn_hidden(cfg):
    if cfg.ffn_hidden:
        return cfg.ffn_hidden
    h = int(8 * cfg.d_model / 3)
    return 32 * ((h + 31) // 32)


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden = llama_ffn_hidden(cfg)
        self.w1 = nn.Linear(cfg.d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, cfg.d_model, bias=False)
        self.w3 = nn.Linear(cfg.d_model, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attention = LlamaAttention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.feed_forward = LlamaMLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        x = x + self.feed_forward(self.ffn_norm(x))
        return x


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.d_model // cfg.n_head
        assert hd % 2 == 0, "RoPE needs an even head dimension"
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList([LlamaBlock(cfg) for _ in range(cfg.n_layer)])
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        t = torch.arange(cfg.block_size, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)                      # [block, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)               # [block, hd]
        self.register_buffer("rope_cos", emb.cos())
        self.register_buffer("rope_sin", emb.sin())
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
        for name, p in self.named_parameters():
            if name.endswith("wo.weight") or name.endswith("w2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def forward(self, idx, targets):
        B, T = idx.size()
        cos = self.rope_cos[:T]
        sin = self.rope_sin[:T]
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, cos, sin)
        x = self.norm(x)
        logits = self.output(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# ----------------------------------------------------------------------------------------------


def build_model(cfg):
    if cfg.model == "gpt2":
        return GPT(cfg)
    if cfg.model == "llama":
        return Llama(cfg)
    raise ValueError(f"unknown model {cfg.model!r} (expected gpt2 or llama)")


def frozen_buffer_names(model):
    """Names of the model's buffers (masks, positions, RoPE tables), as in state_dict."""
    return [name for name, _ in model.named_buffers()]
