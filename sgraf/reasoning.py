"""SGR (similarity graph reasoning) and SAF (similarity attention filtration) heads.

Both take the node tensor N = [s_g; s_1 .. s_L] of every (image, caption) pair with a node
mask, so that all pairs of a block are reasoned over at once and padded word nodes never
influence a score.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from sgraf.encoders import xavier_linear_
from sgraf.functional import EPS, l1norm, l2norm, masked_softmax
from sgraf.shard import holds_rows, sum_over_shards


class GraphReasoning(nn.Module):
    """Parameters of one SGR step (released names): E = softmax_j((W_q n_i)(W_k n_j)^T),
    n_i <- ReLU(W_g sum_j E_ij n_j)."""

    def __init__(self, sim_dim: int) -> None:
        super().__init__()
        self.graph_query_w = nn.Linear(sim_dim, sim_dim)
        self.graph_key_w = nn.Linear(sim_dim, sim_dim)
        self.sim_graph_w = nn.Linear(sim_dim, sim_dim)
        for layer in (self.graph_query_w, self.graph_key_w, self.sim_graph_w):
            xavier_linear_(layer)

    def folded(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Fold query and key projections into one bilinear form.

        (W_q n_i + b_q).(W_k n_j + b_k) = n_i^T M n_j + u.n_j + v.n_i + c with
        M = W_q^T W_k, u = W_k^T b_q, v = W_q^T b_k, c = b_q.b_k. The last two terms are
        constant along the softmax axis j (they cancel); they are kept so the edge logits
        equal the released ones exactly and b_k keeps a (mathematically zero) gradient.

        Returns:
            M (S, S), u (S,), v (S,), c () scalar.
        """
        wq, bq = self.graph_query_w.weight, self.graph_query_w.bias
        wk, bk = self.graph_key_w.weight, self.graph_key_w.bias
        return wq.t() @ wk, wk.t() @ bq, wq.t() @ bk, bq @ bk


class SGR(nn.Module):
    """``steps`` graph-reasoning steps; the global node (index 0) is read out."""

    def __init__(self, sim_dim: int, steps: int = 3) -> None:
        super().__init__()
        if steps < 1:
            raise ValueError(f"sgr_steps must be >= 1, got {steps}")
        self.steps = nn.ModuleList(GraphReasoning(sim_dim) for _ in range(steps))

    def fold(self) -> list[tuple[Tensor, ...]]:
        """Per-step folded weights; compute once and reuse for every block of a call.

        Returns:
            For each non-final step ``(P, c, b_g)`` with P = [M^T | W_g^T | u | v] (S, 2S+2);
            for the final step ``(M, u, v, c, W_g, b_g)``.
        """
        folds: list[tuple[Tensor, ...]] = []
        for step in self.steps[:-1]:
            M, u, v, c = step.folded()
            packed = torch.cat(
                [M.t(), step.sim_graph_w.weight.t(), u.unsqueeze(1), v.unsqueeze(1)], dim=1
            )
            folds.append((packed, c, step.sim_graph_w.bias))
        last = self.steps[-1]
        folds.append((*last.folded(), last.sim_graph_w.weight, last.sim_graph_w.bias))
        return folds

    def forward(
        self, nodes: Tensor, node_mask: Tensor, folds: list[tuple[Tensor, ...]] | None = None
    ) -> Tensor:
        """Reason over the similarity graph of every pair.

        Args:
            nodes: (P, N, S) node vectors of P pairs; node 0 is the global alignment.
            node_mask: (P, N) bool, True for real nodes (node 0 must be True).
            folds: ``self.fold()``, when the caller scores several blocks.

        Returns:
            (P, S) the global node after the last step.
        """
        folds = self.fold() if folds is None else folds
        key_mask = node_mask.unsqueeze(1)  # softmax runs over keys j
        for packed, c, bias in folds[:-1]:
            nodes = self._full_step(packed, c, bias, nodes, key_mask)
        return self._readout_step(*folds[-1], nodes, node_mask)

    @staticmethod
    def _full_step(
        packed: Tensor, c: Tensor, bias: Tensor, nodes: Tensor, key_mask: Tensor
    ) -> Tensor:
        sim = nodes.shape[-1]
        # One GEMM yields M n_j, W_g n_j, u.n_j and v.n_i: two S x S projections per node
        # instead of the released three. W_g is applied before aggregation, which is exact
        # because each edge row sums to one (the bias is added once afterwards).
        # split, not four slices: a slice's backward fills a zero tensor of the whole of
        # proj, split's concatenates once (same values; ~10% of a CPU training step).
        keys, values, u_key, v_query = (nodes @ packed).split([sim, sim, 1, 1], dim=-1)
        logits = torch.bmm(nodes, keys.transpose(1, 2))
        logits = logits + u_key.transpose(1, 2) + (v_query + c)
        edges = masked_softmax(logits, key_mask, dim=-1)
        return F.relu(torch.bmm(edges, values) + bias)

    @staticmethod
    def _readout_step(
        M: Tensor,
        u: Tensor,
        v: Tensor,
        c: Tensor,
        weight: Tensor,
        bias: Tensor,
        nodes: Tensor,
        node_mask: Tensor,
    ) -> Tensor:
        # Only node 0 is read out, so the last step needs a single query row:
        # logits_0j = (M^T n_0 + u).n_j + (v.n_0 + c).
        glob = nodes[:, 0]
        query = glob @ M + u
        logits = torch.bmm(nodes, query.unsqueeze(-1)).squeeze(-1)
        logits = logits + (glob @ v + c).unsqueeze(-1)
        edges = masked_softmax(logits, node_mask, dim=-1)
        agg = torch.bmm(edges.unsqueeze(1), nodes).squeeze(1)
        return F.relu(F.linear(agg, weight, bias))


class SAF(nn.Module):
    """Attention filtration: beta = l1norm_nodes(sigmoid(BN_1(W_a n_j))); l2norm(sum beta_j n_j).

    ``BatchNorm1d(1)`` sees, in the released per-caption loop, one batch per (view,
    caption): all images of the batch times that caption's L+1 nodes. Training mode
    reproduces exactly those statistics (masked over padding) and the sequence of running-
    statistics updates (view-major, then caption order), so that checkpoints trained either
    way behave the same. That needs all images of a view in one block; the scorer ensures it.
    """

    def __init__(self, sim_dim: int) -> None:
        super().__init__()
        self.attn_sim_w = nn.Linear(sim_dim, 1)
        self.bn = nn.BatchNorm1d(1)
        xavier_linear_(self.attn_sim_w)

    def forward(
        self, nodes: Tensor, node_mask: Tensor, stats_out: list[tuple[Tensor, Tensor]] | None = None
    ) -> Tensor:
        """Filter the nodes of every pair.

        Args:
            nodes: (V, I, C, N, S): V views, I images per view (all images of the batch in
                training mode), C captions, N nodes.
            node_mask: (C, N) bool, True for real nodes.
            stats_out: in training mode, receives ``(mean, unbiased_var)`` each (V, C) for a
                later ``update_running_stats`` call; when None the update happens here.

        Returns:
            (V, I, C, S) filtered similarity vectors.
        """
        gate = self.attn_sim_w(nodes).squeeze(-1)  # (V, I, C, N)
        bn = self.bn
        maskf = node_mask.to(gate.dtype)
        if self.training or not bn.track_running_stats:
            # A rank's image rows of the global batch (sgraf.shard): the sums span every rank's.
            shard = sum_over_shards if self.training and holds_rows(gate.shape[1]) else _same
            count = shard(maskf.sum(dim=-1) * gate.shape[1]).detach()  # (C,)
            mean = shard((gate * maskf).sum(dim=(1, 3))) / count  # (V, C)
            centred = gate - mean[:, None, :, None]
            var = shard((centred.square() * maskf).sum(dim=(1, 3))) / count
            normed = centred / torch.sqrt(var[:, None, :, None] + bn.eps)
            if self.training and bn.track_running_stats:
                unbiased = var.detach() * count / (count - 1).clamp(min=1)
                if stats_out is None:
                    self.update_running_stats(mean.detach(), unbiased)
                else:
                    stats_out.append((mean.detach(), unbiased))
        else:
            normed = (gate - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps)
        if bn.affine:
            normed = normed * bn.weight + bn.bias
        weights = l1norm(torch.sigmoid(normed) * maskf, dim=-1, eps=EPS)
        pooled = torch.einsum("vicn,vicns->vics", weights, nodes)
        return l2norm(pooled, dim=-1)

    @torch.no_grad()
    def update_running_stats(self, mean: Tensor, unbiased_var: Tensor) -> None:
        """Apply the per-(view, caption) BN updates in released order, in closed form.

        Args:
            mean: (V, C) batch means; unbiased_var: (V, C) unbiased batch variances.
        """
        bn = self.bn
        xs_mean = mean.reshape(-1).to(bn.running_mean.dtype)
        xs_var = unbiased_var.reshape(-1).to(bn.running_var.dtype)
        k = xs_mean.numel()
        if k == 0:
            return
        if bn.momentum is None:  # cumulative average: r_n = (t0 r_0 + sum x) / (t0 + n)
            # the count is read as a device tensor: no host read of the device
            prior = bn.num_batches_tracked.to(bn.running_mean.dtype)
            bn.num_batches_tracked += k
            bn.running_mean.copy_((prior * bn.running_mean + xs_mean.sum()) / (prior + k))
            bn.running_var.copy_((prior * bn.running_var + xs_var.sum()) / (prior + k))
            return
        bn.num_batches_tracked += k
        m = bn.momentum
        # r_k = (1-m)^k r_0 + sum_i m (1-m)^(k-1-i) x_i
        powers = torch.arange(k - 1, -1, -1, dtype=torch.float64, device=xs_mean.device)
        w = (m * (1 - m) ** powers).to(xs_mean.dtype)
        decay = (1 - m) ** k
        bn.running_mean.copy_(decay * bn.running_mean + (w * xs_mean).sum())
        bn.running_var.copy_(decay * bn.running_var + (w * xs_var).sum())


def _same(t: Tensor) -> Tensor:
    return t
