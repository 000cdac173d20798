"""The seed range of a ``torch.Generator``, shared by the dataset generators and the samplers' loaders."""


def in_torch_seed_range(seed: int) -> bool:
    """Whether ``torch.Generator.manual_seed`` takes the int ``seed``: [-2**63, 2**64), torch's seed range."""
    return -2**63 <= seed < 2**64
