"""safetensors checkpoints with Kimi Linear / K3 tensor names.

A checkpoint directory holds ``config.json`` (Kimi Linear keys, see
:class:`~services.model.arch.config.K3Config`) and ``model.safetensors`` or shards
``model-0000i-of-0000n.safetensors`` with ``model.safetensors.index.json``.

Names are those of the module tree (``model.layers.{i}.self_attn.q_proj.weight``,
``model.layers.{i}.block_sparse_moe.gate.e_score_correction_bias``, ...), except the
routed experts, which the model holds stacked and checkpoints hold per expert as
compressed-tensors MXFP4::

    model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight_packed  uint8 [I, L/2]  (gate)
    model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight_scale   uint8 [I, L/32]
    ... .w3.*  (up, [I, ...]),  ... .w2.*  (down, [L, I/2] and [L, I/32])

or, for dense experts, ``experts.{e}.w{1,2,3}.weight``. K3's multimodal wrapper prefix
``language_model.`` is accepted on load.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from .arch.config import K3Config
from .arch.model import K3ForCausalLM

__all__ = ["save_checkpoint", "load_checkpoint", "checkpoint_tensors", "CheckpointError"]

_EXPERTS = re.compile(
    r"^(model\.layers\.\d+\.block_sparse_moe\.experts)\.(w13|w2)(_packed|_scale)?$"
)
_PER_EXPERT = re.compile(
    r"^(model\.layers\.\d+\.block_sparse_moe\.experts)\.(\d+)\.(w[123])\.(weight(?:_packed|_scale)?)$"
)
_PREFIX = "language_model."


class CheckpointError(ValueError):
    """A checkpoint does not match the config (names, shapes or files)."""


def checkpoint_tensors(model: K3ForCausalLM) -> dict[str, torch.Tensor]:
    """The model's tensors under checkpoint names (experts split per expert)."""
    out: dict[str, torch.Tensor] = {}
    for name, t in model.state_dict().items():
        m = _EXPERTS.match(name)
        if not m:
            out[name] = t
            continue
        base, which, suffix = m.group(1), m.group(2), m.group(3) or ""
        leaf = {"": "weight", "_packed": "weight_packed", "_scale": "weight_scale"}[suffix]
        for e in range(t.shape[0]):
            if which == "w13":
                gate, up = t[e].chunk(2, dim=0)
                out[f"{base}.{e}.w1.{leaf}"] = gate
                out[f"{base}.{e}.w3.{leaf}"] = up
            else:
                out[f"{base}.{e}.w2.{leaf}"] = t[e]
    if model.config.tie_word_embeddings:
        out.pop("lm_head.weight", None)
    return {k: v.detach().contiguous() for k, v in out.items()}


def save_checkpoint(
    model: K3ForCausalLM,
    path: str | Path,
    *,
    dtype: torch.dtype | None = None,
    max_shard_bytes: int = 4 << 30,
) -> Path:
    """Write ``config.json`` and safetensors shard(s) to directory ``path``.

    ``dtype`` casts floating tensors (e.g. ``torch.bfloat16``); MXFP4 bytes and the
    fp32 KDA decay parameters stay as they are.
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tensors = checkpoint_tensors(model)
    if dtype is not None:
        keep_fp32 = ("A_log", "dt_bias", "e_score_correction_bias")
        tensors = {
            k: (v.to(dtype) if v.is_floating_point() and not k.endswith(keep_fp32) else v)
            for k, v in tensors.items()
        }
    cfg = model.config.to_dict()
    if not model.config.experts_mxfp4:
        cfg["quantization_config"] = None
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for k in sorted(tensors):
        nbytes = tensors[k].numel() * tensors[k].element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][k] = tensors[k]
        size += nbytes
    meta = {"format": "pt", "producer": "k3stack"}
    if len(shards) == 1:
        save_file(shards[0], str(out / "model.safetensors"), metadata=meta)
        return out
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / fname), metadata=meta)
        weight_map.update(dict.fromkeys(shard, fname))
    index = {
        "metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())}
    }
    index["weight_map"] = weight_map
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return out


def _files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.exists():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [path / n for n in names]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"no *.safetensors files in {path}")
    return files


def load_checkpoint(
    path: str | Path,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    config: K3Config | None = None,
) -> K3ForCausalLM:
    """Build the model from ``path/config.json`` (or ``config``) and load its tensors.

    Every model tensor must be present and no unknown tensor may be left over; shape
    mismatches name the tensor. Floating tensors are cast to ``dtype``.
    """
    root = Path(path)
    if config is None:
        cfg_file = root / "config.json"
        if not cfg_file.exists():
            raise CheckpointError(f"{cfg_file} not found")
        config = K3Config.from_json_file(cfg_file)
    model = K3ForCausalLM(config)
    state = model.state_dict()
    stacked: dict[str, torch.Tensor] = {}
    loaded: set[str] = set()
    unexpected: list[str] = []
    for f in _files(root):
        with safe_open(str(f), framework="pt", device="cpu") as fh:
            for raw in fh.keys():
                name = raw[len(_PREFIX) :] if raw.startswith(_PREFIX) else raw
                t = fh.get_tensor(raw)
                m = _PER_EXPERT.match(name)
                if m:
                    base, e, w, leaf = m.group(1), int(m.group(2)), m.group(3), m.group(4)
                    suffix = {"weight": "", "weight_packed": "_packed", "weight_scale": "_scale"}[
                        leaf
                    ]
                    key = f"{base}.{'w2' if w == 'w2' else 'w13'}{suffix}"
                    if key not in state:
                        unexpected.append(raw)
                        continue
                    dst = stacked.setdefault(key, state[key].clone())
                    if w == "w2":
                        rows = slice(None)
                    else:
                        half = dst.shape[1] // 2
                        rows = slice(0, half) if w == "w1" else slice(half, None)
                    if dst[e, rows].shape != t.shape:
                        raise CheckpointError(
                            f"{raw}: shape {tuple(t.shape)}, expected {tuple(dst[e, rows].shape)}"
                        )
                    dst[e, rows] = t.to(dst.dtype)
                    loaded.add(f"{key}[{e}].{w}")
                    continue
                if name not in state:
                    unexpected.append(raw)
                    continue
                if state[name].shape != t.shape:
                    raise CheckpointError(
                        f"{raw}: shape {tuple(t.shape)}, expected {tuple(state[name].shape)}"
                    )
                stacked[name] = t
                loaded.add(name)
    if config.tie_word_embeddings:
        stacked.setdefault("lm_head.weight", stacked.get("model.embed_tokens.weight"))
    missing = [k for k in state if k not in stacked]
    for key, dst in stacked.items():
        if _EXPERTS.match(key):
            for e in range(dst.shape[0]):
                for w in ("w2",) if key.rsplit(".", 1)[-1].startswith("w2") else ("w1", "w3"):
                    if f"{key}[{e}].{w}" not in loaded:
                        missing.append(f"{key}[expert {e}].{w}")
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {root} does not match the config: missing {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''}, unexpected {unexpected[:8]}"
            f"{' ...' if len(unexpected) > 8 else ''}"
        )
    model.load_state_dict(stacked, strict=True)
    model.to(device)
    for p in model.parameters():
        if p.is_floating_point():
            p.data = p.data.to(dtype)
    return model.eval()
