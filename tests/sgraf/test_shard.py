"""sgraf.shard: without a shard the layers are nn.Dropout / nn.BatchNorm1d bit for bit; on two
gloo ranks holding halves of a batch they give the whole batch's outputs, masks, gradients and
running statistics."""

from __future__ import annotations

import socket
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from sgraf.shard import BatchShard, ShardBatchNorm1d, ShardDropout, batch_shard, current_shard

ROWS, CHANNELS, WIDTH = 8, 5, 6
LENGTHS = (3, 5)  # each rank's padded caption width; the global batch's is the longest


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(ROWS, CHANNELS, WIDTH, generator=gen), torch.randn(
        ROWS, CHANNELS, WIDTH, generator=gen
    )


def test_without_a_shard_the_layers_are_torchs_own() -> None:
    x, _ = _inputs()
    assert current_shard() is None
    for ours, theirs in ((ShardDropout(0.4), nn.Dropout(0.4)),
                         (ShardBatchNorm1d(CHANNELS), nn.BatchNorm1d(CHANNELS))):  # fmt: skip
        torch.manual_seed(3)
        a = ours(x)
        torch.manual_seed(3)
        b = theirs(x)
        assert torch.equal(a, b)
        assert all(torch.equal(p, q) for p, q in zip(ours.state_dict().values(),
                                                     theirs.state_dict().values()))  # fmt: skip
    # a shard whose rows are the whole batch leaves the input to torch's code path too
    with batch_shard(BatchShard(0, ROWS)):
        torch.manual_seed(3)
        a = ShardDropout(0.4)(x)
    torch.manual_seed(3)
    assert torch.equal(a, nn.Dropout(0.4)(x))


def _rank(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)  # fmt: skip
    torch.set_num_threads(1)
    x, weight = _inputs()
    half = ROWS // 2
    rows = slice(rank * half, (rank + 1) * half)
    local = x[rows].clone().requires_grad_(True)
    bn = ShardBatchNorm1d(CHANNELS)
    words = torch.ones(half, LENGTHS[rank], WIDTH)  # the output is the mask itself
    torch.manual_seed(7)  # every rank: one process's generator
    with batch_shard(BatchShard(rank * half, ROWS)):
        y = bn(local)
        dropped = ShardDropout(0.4)(words)
    (y * weight[rows]).sum().backward()
    torch.save({"y": y.detach(), "grad": local.grad, "w_grad": bn.weight.grad,
                "b_grad": bn.bias.grad, "state": bn.state_dict(),
                "mask": dropped}, Path(out) / f"rank{rank}.pt")  # fmt: skip
    dist.barrier()  # neither rank leaves while the other is still in a collective
    dist.destroy_process_group()


def test_two_ranks_give_the_whole_batch(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_rank, args=(port, str(tmp_path)), nprocs=2, start_method="spawn")
    parts = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]

    x, weight = _inputs()
    x.requires_grad_(True)
    bn = nn.BatchNorm1d(CHANNELS)
    y = bn(x)
    (y * weight).sum().backward()
    torch.manual_seed(7)
    mask = nn.functional.dropout(torch.ones(ROWS, max(LENGTHS), WIDTH), 0.4, training=True)

    half = ROWS // 2
    torch.testing.assert_close(torch.cat([p["y"] for p in parts]), y.detach())
    torch.testing.assert_close(torch.cat([p["grad"] for p in parts]), x.grad)
    # DDP sums (then averages) the parameter gradients of the ranks
    torch.testing.assert_close(parts[0]["w_grad"] + parts[1]["w_grad"], bn.weight.grad)
    torch.testing.assert_close(parts[0]["b_grad"] + parts[1]["b_grad"], bn.bias.grad)
    for part in parts:
        for key, value in bn.state_dict().items():
            torch.testing.assert_close(part["state"][key], value)
    for rank, part in enumerate(parts):
        expected = mask[rank * half : (rank + 1) * half, : LENGTHS[rank]]
        assert torch.equal(part["mask"], expected)  # the bits one process draws
