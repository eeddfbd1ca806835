"""UGNCL reads a backbone's scores on their unit scale (``SimilarityModel.unit_scores``): SGRAF's
raw scores as they are, CLIP's cosine instead of ``logit_scale.exp() * cos``, on which the
evidence ``exp(tanh(r)/tau)`` saturates (every pair's evidence ``e^10``, every pair noisy)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from sgraf.model import SGRAF
from ugncl.backbones.clip.adapter import CLIPSimilarity
from ugncl.core.data import PairBatch
from ugncl.core.engine.context import MethodContext, StepContext
from ugncl.core.engine.device import select_precision
from ugncl.core.evaluation import EncodedSplit, score_matrix
from ugncl.methods.ugncl.division import CLEAN, HARD_CLEAN, HARD_NOISY, NOISY
from ugncl.methods.ugncl.method import UGNCLMethod

K, DIM, TEMPERATURE = 8, 512, 100.0  # pretrained CLIP's logit_scale.exp() is ~100


class FixedEmbeddings(nn.Module):
    """The part of an open_clip model ``CLIPSimilarity`` calls: images are their embeddings,
    caption ``k`` (token ids ``[[k]]``) is row ``k`` of a table; a learnable ``logit_scale``."""

    def __init__(self, captions: Tensor, temperature: float) -> None:
        super().__init__()
        self.captions = nn.Parameter(captions.clone())
        self.logit_scale = nn.Parameter(torch.tensor(math.log(temperature)))

    def encode_image(self, images: Tensor) -> Tensor:
        return images

    def encode_text(self, tokens: Tensor) -> Tensor:
        return self.captions[tokens[:, 0]]


def clip_world(temperature: float = TEMPERATURE) -> tuple[CLIPSimilarity, PairBatch, Tensor]:
    """A CLIP similarity model over fixed embeddings on pretrained CLIP's cosine scale (a
    shared direction: unrelated pairs at cosine ~0.2, matching ones at ~0.36) and a batch of K
    pairs whose first half is clean and second half noisy (the captions of the noisy half
    shifted by one, as shuffled captions are); returns the model, the batch and the clean
    flags."""
    gen = torch.Generator().manual_seed(0)
    common = 0.5 * nn.functional.normalize(torch.randn(DIM, generator=gen), dim=0)
    own = torch.randn(K, DIM, generator=gen) / math.sqrt(DIM)
    images = common + own
    related = common + 0.2 * own + 0.98 * torch.randn(K, DIM, generator=gen) / math.sqrt(DIM)
    clean = torch.arange(K) < K // 2
    half = torch.arange(K // 2)
    captions = related[torch.cat([half, K // 2 + (half + 1) % (K // 2)])]
    model = CLIPSimilarity(FixedEmbeddings(captions, temperature), {"context_length": 1})
    batch = PairBatch(
        images=images, captions=torch.arange(K)[:, None], lengths=torch.ones(K, dtype=torch.long),
        index=torch.arange(K), image_index=torch.arange(K), clean=clean,
    )  # fmt: skip
    return model, batch, clean


def cosines(model: CLIPSimilarity, batch: PairBatch) -> Tensor:
    img = nn.functional.normalize(batch.images, dim=-1)
    cap = nn.functional.normalize(model.model.encode_text(batch.captions), dim=-1)
    return img @ cap.t()


def test_clip_unit_scores_are_the_cosine() -> None:
    """CLIP's raw score is ``logit_scale.exp() * cos``; its unit scores are the cosine, and the
    temperature gets no gradient through them."""
    model, batch, _ = clip_world()
    raw = model(batch.images, batch.captions, batch.lengths)
    unit = model.unit_scores(raw)
    torch.testing.assert_close(unit[0], cosines(model, batch), atol=1e-5, rtol=0)
    torch.testing.assert_close(raw, TEMPERATURE * unit)  # raw: the x~100 scale
    assert unit.abs().max() <= 1 + 1e-5
    unit.sum().backward()
    assert abs(float(model.logit_scale.grad)) < 1e-4


def test_sgraf_unit_scores_are_its_raw_scores() -> None:
    """SGRAF's pre-sigmoid scores are on the unit scale already: the very same tensor, so the
    SGRAF path of UGNCL is bit-identical to reading raw scores."""
    torch.manual_seed(0)
    model = SGRAF(20, word_dim=8, img_dim=12, embed_dim=16, sim_dim=8, num_regions=4)
    raw = model(torch.rand(3, 4, 12), torch.randint(4, 20, (3, 5)), torch.tensor([5, 3, 4]))
    assert model.unit_scores(raw) is raw


def _division_record(tmp_path, model: CLIPSimilarity, batch: PairBatch, clean: Tensor) -> dict:
    """UGNCL's first division (``division_pass: training``): one warm-up step records each
    pair's opinion within the batch, the next epoch start divides by them."""
    cpu = torch.device("cpu")
    method = UGNCLMethod(lambda_min=2)
    method.prepare(model, K)
    step = StepContext(epoch=0, global_step=0, warmup=True, device=cpu)
    terms = method.training_step(model, batch, step)
    assert all(torch.isfinite(v).all() for v in terms.values())
    ctx = MethodContext(
        model=model, device=cpu, precision=select_precision("off", cpu), run_dir=tmp_path,
        seed=0, warmup_epochs=1, batch_size=K, num_samples=K, clean=clean.numpy(),
        recorder=None, batches=lambda *a, **kw: [batch], global_step=1,
        fetch=lambda indices: batch,
    )  # fmt: skip
    record = method.on_epoch_start(ctx, epoch=1)
    return {**record, "sets": method.division.sets, "u": method.division.u}


def test_ugncl_divides_clip_scores_by_their_cosine(tmp_path) -> None:
    """On raw x100 logits tanh saturates: every evidence is e^10 (float32 ties), every pair's
    uncertainty ~K / (K e^10), and the argmax over tied evidence divides a clean pair noisy.
    On the cosine the evidence is graded (uncertainty ~0.05 here), the clean half is divided
    clean and the noisy half noisy."""
    model, batch, clean = clip_world()
    record = _division_record(tmp_path, model, batch, clean)
    assert (record["u"] > 1e-3).all(), record["u"]
    sets = record["sets"]
    assert np.isin(sets[: K // 2], (CLEAN, HARD_CLEAN)).all(), sets
    assert np.isin(sets[K // 2 :], (NOISY, HARD_NOISY)).all(), sets
    assert record["noisy_f1"] == 1.0


def test_ugncl_division_on_clip_does_not_depend_on_the_temperature(tmp_path) -> None:
    """The evidence reads the cosine, so CLIP's learned temperature (~14 for the stand-in
    model, ~100 pretrained) does not change the division."""
    runs = []
    for temperature in (14.0, 100.0):
        model, batch, clean = clip_world(temperature)
        runs.append(_division_record(tmp_path, model, batch, clean))
    assert runs[0]["sets"].tolist() == runs[1]["sets"].tolist()
    np.testing.assert_allclose(runs[0]["noisy_f1"], runs[1]["noisy_f1"])


def test_evaluation_ranks_ugncl_on_clip_by_the_cosines_evidence() -> None:
    """Evaluation hands UGNCL's retrieval score the unit scores: its evidence ranking on CLIP is
    ``tanh(cos) / tau``, not a saturated ``tanh(100 cos) / tau`` of ties."""
    model, batch, _ = clip_world()
    method = UGNCLMethod()  # eval_score "evidence"
    assert method.reads_unit_scores
    with torch.no_grad():
        encoded = EncodedSplit(
            img_emb=model.encode_images(batch.images),
            cap_emb=model.encode_captions(batch.captions),
            lengths=batch.lengths, caption_to_image=np.arange(K), image_axis=0,
        )  # fmt: skip
        scores = score_matrix(
            model, encoded, score=method.retrieval_score, unit_scores=method.reads_unit_scores
        )
        expected = (torch.tanh(cosines(model, batch)) / method.config.tau).numpy()
    np.testing.assert_allclose(scores, expected, atol=1e-4)
    assert len(np.unique(scores.round(4))) == K * K  # no ties
