"""safetensors checkpoints with K3 names, and the random-init checkpoint tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from services.model.arch import K3Config, K3ForCausalLM
from services.model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from services.model.tools.init_checkpoint import main as init_checkpoint

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny")
    assert init_checkpoint(["--preset", "tiny", "--out", str(out), "--seed", "3"]) == 0
    return out


def test_tensor_names_follow_k3(tiny_dir: Path) -> None:
    with safe_open(str(tiny_dir / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        packed = f.get_tensor("model.layers.1.block_sparse_moe.experts.15.w1.weight_packed")
        scale = f.get_tensor("model.layers.1.block_sparse_moe.experts.15.w2.weight_scale")
    cfg = K3Config.preset("tiny")
    im, lw = cfg.moe_intermediate_size, cfg.routed_width
    assert packed.dtype == torch.uint8 and packed.shape == (im, lw // 2)
    assert scale.dtype == torch.uint8 and scale.shape == (lw, im // 32)
    for name in [
        "model.embed_tokens.weight",
        "lm_head.weight",
        "model.norm.weight",
        "model.output_attn_res_proj.weight",
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.self_attn.q_conv1d.weight",
        "model.layers.0.self_attn.A_log",
        "model.layers.0.self_attn.g_proj.weight",
        "model.layers.0.self_attention_res_norm.weight",
        "model.layers.0.mlp_res_proj.weight",
        "model.layers.3.self_attn.kv_a_proj_with_mqa.weight",
        "model.layers.3.self_attn.kv_b_proj.weight",
        "model.layers.3.block_sparse_moe.gate.e_score_correction_bias",
        "model.layers.3.block_sparse_moe.shared_experts.down_proj.weight",
        "model.layers.3.block_sparse_moe.routed_expert_down_proj.weight",
        "model.layers.3.block_sparse_moe.routed_expert_norm.weight",
        "model.layers.3.block_sparse_moe.experts.0.w3.weight_scale",
    ]:
        assert name in names, name
    assert not any(".w13" in n for n in names)
    cfg_json = json.loads((tiny_dir / "config.json").read_text())
    assert cfg_json["quantization_config"]["format"] == "mxfp4-pack-quantized"
    assert cfg_json["linear_attn_config"]["full_attn_layers"] == [4, 8]


def test_load_reproduces_the_model(tiny_dir: Path) -> None:
    ref = K3ForCausalLM(K3Config.preset("tiny")).init_weights(3).eval()
    model = load_checkpoint(tiny_dir)
    ids = torch.arange(12)[None]
    with torch.no_grad():
        assert torch.equal(ref(ids), model(ids))


def test_dense_experts_and_shards_round_trip(tmp_path: Path) -> None:
    cfg = K3Config.preset("tiny")
    cfg.quantization_config = None
    model = K3ForCausalLM(cfg).init_weights(1).eval()
    save_checkpoint(model, tmp_path, max_shard_bytes=1 << 20)
    assert (tmp_path / "model.safetensors.index.json").exists()
    assert len(list(tmp_path.glob("model-*-of-*.safetensors"))) > 1
    again = load_checkpoint(tmp_path)
    assert not again.config.experts_mxfp4
    ids = torch.arange(9)[None]
    with torch.no_grad():
        assert torch.equal(model(ids), again(ids))


def test_language_model_prefix_is_accepted(tiny_dir: Path, tmp_path: Path) -> None:
    with safe_open(str(tiny_dir / "model.safetensors"), "pt") as f:
        tensors = {f"language_model.{k}": f.get_tensor(k) for k in f.keys()}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "kimi_k3",
                "text_config": json.loads((tiny_dir / "config.json").read_text()),
            }
        )
    )
    loaded = load_checkpoint(tmp_path).state_dict()
    expected = load_checkpoint(tiny_dir).state_dict()
    assert loaded.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(loaded[name], tensor), name


def test_missing_and_unexpected_tensors_are_named(tiny_dir: Path, tmp_path: Path) -> None:
    with safe_open(str(tiny_dir / "model.safetensors"), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    del tensors["model.layers.2.block_sparse_moe.experts.4.w3.weight_packed"]
    tensors["model.layers.0.bogus.weight"] = torch.zeros(1)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((tiny_dir / "config.json").read_text())
    with pytest.raises(CheckpointError, match=r"expert 4\]\.w3.*bogus"):
        load_checkpoint(tmp_path)


def test_k3_preset_refuses_to_allocate(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert init_checkpoint(["--preset", "k3", "--out", str(tmp_path / "k3")]) == 2
    err = capsys.readouterr().err
    assert "2,779.5B parameters" in err and "refuses" in err
    assert not (tmp_path / "k3").exists()


def test_unknown_preset_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert init_checkpoint(["--preset", "huge", "--out", str(tmp_path)]) == 2
    assert "choose one of" in capsys.readouterr().err


def test_quantization_config_parses_with_compressed_tensors(tiny_dir: Path) -> None:
    """The saved config follows compressed-tensors' schema, and its targets are exactly the
    tensors stored packed."""
    from compressed_tensors.quantization import QuantizationConfig, QuantizationStrategy
    from compressed_tensors.utils.match import match_name

    raw = json.loads((tiny_dir / "config.json").read_text())["quantization_config"]
    config = QuantizationConfig.model_validate(raw)
    assert config.format == "mxfp4-pack-quantized" and config.quant_method == "compressed-tensors"
    (scheme,) = config.config_groups.values()
    w = scheme.weights
    assert (w.num_bits, w.type, w.group_size, w.strategy) == (
        4,
        "float",
        32,
        QuantizationStrategy.GROUP,
    )
    assert scheme.input_activations is None  # weights only: W4A16
    with safe_open(str(tiny_dir / "model.safetensors"), "pt") as f:
        names = list(f.keys())
    packed = {n.removesuffix(".weight_packed") for n in names if n.endswith(".weight_packed")}
    modules = {n.rsplit(".", 1)[0] for n in names if n.endswith(".weight") or n.endswith("_packed")}
    targeted = {m for m in modules if any(match_name(m, t) for t in scheme.targets)}
    assert packed and targeted == packed
