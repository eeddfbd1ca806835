"""The reference algorithm of SGRAF scoring: the released per-caption loop, written out from
the equations (for each caption, repeat it over the images, SCAN attention, alignment vectors,
then SGR with separate query/key projections or SAF). The batched scorer is tested against it
(tests/sgraf/test_scoring.py) and ``tools/bench.py scoring`` times against it."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from sgraf.functional import l1norm, l2norm
from sgraf.model import SGRAF


def _reference_scan(query: Tensor, context: Tensor, smooth: float) -> Tensor:
    """(n, L, E) words, (n, R, E) regions -> (n, L, E) attended context (released layout)."""
    attn = torch.bmm(context, query.transpose(1, 2))  # (n, R, L)
    attn = l2norm(F.leaky_relu(attn, 0.1), dim=2)  # over words
    attn = torch.softmax(attn.transpose(1, 2) * smooth, dim=2)  # over regions
    weighted = torch.bmm(context.transpose(1, 2), attn.transpose(1, 2)).transpose(1, 2)
    return l2norm(weighted, dim=-1)


def _reference_global(module, local: Tensor) -> Tensor:
    """VisualSA/TextSA on unpadded input: (n, K, E) -> (n, E)."""
    l_emb = module.embedding_local(local)
    g_emb = module.embedding_global(local.mean(dim=1))
    weights = module.embedding_common(l_emb * g_emb.unsqueeze(1)).squeeze(2)
    weights = torch.softmax(weights, dim=1)
    return l2norm((weights.unsqueeze(2) * local).sum(dim=1), dim=-1)


def _reference_view(head, img: Tensor, cap_emb: Tensor, lengths: Tensor) -> Tensor:
    n_image = img.shape[0]
    img_glo = _reference_global(head.v_global_w, img)
    sims = []
    for i in range(cap_emb.shape[0]):
        n_word = int(lengths[i])
        cap_i = cap_emb[i, :n_word].unsqueeze(0)
        cap_i_expand = cap_i.repeat(n_image, 1, 1)
        cap_glo_i = _reference_global(head.t_global_w, cap_i)
        context = _reference_scan(cap_i_expand, img, head.attn_smooth)
        sim_loc = l2norm(head.sim_tranloc_w((context - cap_i_expand).pow(2)), dim=-1)
        sim_glo = l2norm(head.sim_tranglo_w((img_glo - cap_glo_i).pow(2)), dim=-1)
        sim_emb = torch.cat([sim_glo.unsqueeze(1), sim_loc], dim=1)
        if head.head == "sgr":
            for step in head.sgr.steps:
                q = step.graph_query_w(sim_emb)
                k = step.graph_key_w(sim_emb)
                edge = torch.softmax(torch.bmm(q, k.transpose(1, 2)), dim=-1)
                sim_emb = F.relu(step.sim_graph_w(torch.bmm(edge, sim_emb)))
            sim_vec = sim_emb[:, 0, :]
        else:
            gate = head.saf.attn_sim_w(sim_emb).permute(0, 2, 1)
            attn = l1norm(torch.sigmoid(head.saf.bn(gate)), dim=-1)
            sim_vec = l2norm(torch.matmul(attn, sim_emb).squeeze(1), dim=-1)
        sims.append(head.sim_eval_w(sim_vec))
    return torch.cat(sims, dim=1)


def reference_scores(model: SGRAF, img_emb: Tensor, cap_emb: Tensor, lengths: Tensor) -> Tensor:
    """Per-caption loop over each view, as the released code: (W, n_img, n_cap) raw scores."""
    return torch.stack([_reference_view(model.sim_enc, v, cap_emb, lengths) for v in img_emb])
