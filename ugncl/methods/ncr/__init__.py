"""NCR (noisy correspondence rectifier, NeurIPS 2021): two co-trained SGRAF networks, a GMM
co-divide and soft-margin hinges on co-rectified labels (docs/methods/ncr.md)."""
