"""The league command (issue 43 item 2): its measures against hand computations, and the file on a tiny
setting (a few steps): the header, resuming, no machine paths.

Shape legend: ``B`` sequences, ``T`` positions, ``D`` width, ``N`` layers, ``H`` heads.
"""

from __future__ import annotations

import hashlib
import json
import math

import pytest
import torch

from attncore.training import CharTransformer, TrainConfig
from attncore.training.league import (
    FILE,
    LEAGUE,
    league_configs,
    league_table,
    load_league,
    main,
    residual_stats,
    run_key,
    sink_rate,
)
from tests.training_utils import SNIPPET, VOCAB

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _probes(curves: list[list[list[float]]]) -> list[dict]:
    """Probes whose ``bos_other`` at evaluation point i is curves[i] (N x H)."""
    return [{"bos_other": c} for c in curves]


def test_sink_rate_is_the_share_of_heads_whose_end_weight_exceeds_the_threshold() -> None:
    # 2 layers x 2 heads, 4 evaluation points; the rule reads the mean of the last 3
    curves = [
        [[0.9, 0.0], [0.0, 0.0]],
        [[0.5, 0.31], [0.2, 0.1]],
        [[0.5, 0.31], [0.2, 0.4]],
        [[0.5, 0.31], [0.5, 0.4]],
    ]
    rate, ends = sink_rate(_probes(curves))
    assert ends[0] == pytest.approx([0.5, 0.31])
    assert ends[1] == pytest.approx([0.3, 0.3])  # exactly 0.3 is not above it
    assert rate == pytest.approx(2 / 4)
    # counterfactual: one head's last points drop below 0.3 -> the rate falls by one head
    curves[3][0][1] = 0.2
    rate2, ends2 = sink_rate(_probes(curves))
    assert ends2[0][1] == pytest.approx((0.31 + 0.31 + 0.2) / 3) and rate2 == pytest.approx(1 / 4)
    # an early crossing alone is not a sink (the 0.9 at the first point is outside the last 3)
    assert sink_rate(_probes([[[0.9]], [[0.1]], [[0.1]], [[0.1]]]))[0] == 0.0
    assert sink_rate([]) == (None, [])


def _model(seed: int = 0) -> CharTransformer:
    cfg = TrainConfig(n_layer=2, n_head=2, d_model=16, context=12, batch=2, steps=5, warmup=0, eval_every=5)
    m = CharTransformer.create(cfg, VOCAB, torch.Generator().manual_seed(seed))
    with torch.no_grad():  # a residual stream far from Gaussian: one channel of one token very large
        m.tok.weight[3, 5] = 40.0
    return m.eval()


def test_residual_stats_match_the_blocks_outputs_and_the_kurtosis_formula() -> None:
    m = _model()
    ids = torch.randint(0, len(VOCAB), (3, 10), generator=torch.Generator().manual_seed(1))
    ids[0, 4] = 3
    outs: list[torch.Tensor] = []
    hooks = [blk.register_forward_hook(lambda mod, a, o: outs.append(o[0].detach())) for blk in m.blocks]
    with torch.no_grad():
        m(ids)
    for h in hooks:
        h.remove()
    got = residual_stats(m, ids)
    assert len(outs) == 2 and len(got["max_abs"]) == 2
    for li, x in enumerate(outs):  # (B, T, D)
        xs = x.double().reshape(-1, x.shape[-1]).tolist()
        want_max = max(abs(v) for row in xs for v in row)
        kurts = []
        for row in xs:
            mu = sum(row) / len(row)
            var = sum((v - mu) ** 2 for v in row) / len(row)
            kurts.append(sum((v - mu) ** 4 for v in row) / len(row) / var**2)
        assert got["max_abs"][li] == pytest.approx(want_max, rel=1e-6)
        assert got["kurtosis"][li] == pytest.approx(sum(kurts) / len(kurts), rel=1e-6)
    assert got["max_activation"] == max(got["max_abs"]) and got["max_activation"] > 30  # the planted channel
    assert got["kurtosis_max"] == max(got["kurtosis"])
    # Gaussian channels give about 3 (the formula is Pearson's, not the excess)
    g = torch.randn(4000, 64, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    c = g - g.mean(-1, keepdim=True)
    assert float((c.pow(4).mean(-1) / c.square().mean(-1).square()).mean()) == pytest.approx(3.0, abs=0.1)


def test_league_settings() -> None:
    configs = league_configs()
    assert len(configs) == len(LEAGUE["variants"]) * 2 * 3 == 48
    c = configs[0]
    assert (c.n_layer, c.n_head) == (2, 4)
    assert {x.variant for x in configs} == {"standard", "softmax1", "sink_logit", "relu", "gated",
                                           "gated_headwise", "gated_control", "softpick"}
    assert len({run_key(x.to_dict()) for x in configs}) == 48
    assert [x.seed for x in configs[:16]] == [0] * 16  # seed by seed: a partial file covers every cell


def _run(tmp_path, *extra: str) -> int:
    corpus = tmp_path / "snippet.txt"
    if not corpus.exists():
        corpus.write_text(SNIPPET * 20, encoding="utf-8")
    return main(["--out", str(tmp_path / "out"), "--corpus", str(corpus), "--steps", "3", *extra])


def test_league_command_header_and_resume(tmp_path) -> None:
    assert _run(tmp_path, "--limit", "2") == 0
    path = tmp_path / "out" / FILE
    header, runs = load_league(path)
    text = path.read_text(encoding="utf-8")
    assert str(tmp_path) not in text and "/tmp" not in text  # no machine paths in any line
    assert header["command"].startswith("python -m attncore.training.league --out out --corpus snippet.txt")
    data = (tmp_path / "snippet.txt").read_bytes()
    assert header["corpus"] == {"name": "snippet.txt", "sha256": hashlib.sha256(data).hexdigest(),
                                "chars": len(data.decode("utf-8"))}
    assert header["machine"] and "git_commit" in header and header["league"]["base"]["steps"] == 3
    assert [r["config"]["variant"] for r in runs] == ["standard", "softmax1"]
    for r in runs:
        assert 0.0 <= r["sink_rate"] <= 1.0 and len(r["bos_end"]) == 2 and len(r["bos_end"][0]) == 4
        assert r["max_activation"] > 0 and math.isfinite(r["kurtosis"]) and math.isfinite(r["loss"])
        assert r["steps"][-1] == 3
    assert runs[1]["nowhere_other"] > 0 and abs(runs[0]["nowhere_other"]) < 1e-6  # softmax1 spends less
    # resume: a cut-off last line is skipped and that run trained again; nothing repeats, one header
    with path.open("a", encoding="utf-8") as f:
        f.write('{"config": {"variant": "sink_logit", "lr"')
    assert _run(tmp_path, "--limit", "2") == 0
    lines = path.read_text(encoding="utf-8").splitlines()
    header2, runs2 = load_league(path)
    assert header2 == header and sum('"kind": "header"' in ln for ln in lines) == 1
    keys = [run_key(r["config"]) for r in runs2]
    assert len(keys) == len(set(keys)) == 4
    assert [r["config"]["variant"] for r in runs2[2:]] == ["sink_logit", "relu"]
    assert json.loads(keys[2]) == {"variant": "sink_logit", "lr": 0.001, "seed": 0, "sink_init": 0.0}


def test_league_refuses_a_file_made_with_other_settings(tmp_path, capsys) -> None:
    assert _run(tmp_path, "--limit", "1") == 0
    corpus = tmp_path / "snippet.txt"
    assert main(["--out", str(tmp_path / "out"), "--corpus", str(corpus), "--steps", "4", "--limit", "1"]) == 2
    assert "other settings" in capsys.readouterr().err
    assert len(load_league(tmp_path / "out" / FILE)[1]) == 1
    assert main(["--out", str(tmp_path / "o2"), "--corpus", str(tmp_path / "missing.txt")]) == 2
    err = capsys.readouterr().err
    assert "missing.txt" in err and str(tmp_path) not in err


def test_league_table_means_and_t_intervals_per_cell() -> None:
    def rec(label: str, lr: float, seed: int, rate: float, diverged: int | None = None) -> dict:
        return {"label": label, "variant": label, "config": {"lr": lr, "seed": seed}, "sink_rate": rate,
                "loss": 1.0 + rate, "diverged_at": diverged}

    runs = [rec("softmax", 1e-3, 0, 0.5), rec("softmax", 1e-3, 1, 0.25), rec("softmax", 1e-3, 2, 0.75),
            rec("softmax", 1e-3, 2, 0.0),  # a repeated seed counts once
            rec("softpick", 1e-3, 0, 0.0), rec("softpick", 1e-3, 1, 0.0, diverged=40),
            rec("softmax", 1e-2, 0, 0.125)]
    table = league_table(runs)
    assert [(c["label"], c["lr"]) for c in table] == [("softmax", 1e-3), ("softpick", 1e-3), ("softmax", 1e-2)]
    a = table[0]
    assert a["seeds"] == [0, 1, 2] and a["sink_rate"]["n"] == 3
    assert a["sink_rate"]["mean"] == pytest.approx(0.5)
    se = math.sqrt(((0.0) ** 2 + 0.25**2 + 0.25**2) / 2 / 3)
    assert a["sink_rate"]["half"] == pytest.approx(4.303 * se, rel=1e-3)  # t(0.975, 2) = 4.303
    assert table[1]["diverged"] == [1] and table[1]["sink_rate"]["n"] == 1 and table[1]["sink_rate"]["half"] is None
    assert table[2]["loss"]["mean"] == pytest.approx(1.125) and table[2]["kurtosis"]["n"] == 0


def test_shard_and_corpus_read_or_say_why(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The sink grid's and the league's shared reading of --shard and --corpus: a bad shard or an unreadable
    file is a plain message naming the file by its name only (no folder of this machine), and None."""
    from attncore.training.record import shard_and_corpus

    f = tmp_path / "corpus.txt"
    f.write_text("abc", encoding="utf-8")
    assert shard_and_corpus("1/2", f) == (1, 2, "abc")
    for bad in ("2/2", "x", "1/0", "-1/3"):
        assert shard_and_corpus(bad, f) is None
        assert "--shard takes I/N" in capsys.readouterr().err
    assert shard_and_corpus("0/1", tmp_path / "missing.txt") is None
    err = capsys.readouterr().err
    assert "cannot read the corpus missing.txt" in err and str(tmp_path) not in err
