"""The seed range of a ``torch.Generator`` and its check, shared by the dataset generators and the samplers."""

from graphfuse.checks import is_int


def in_torch_seed_range(seed: int) -> bool:
    """Whether ``torch.Generator.manual_seed`` takes the int ``seed``: [-2**63, 2**64), torch's seed range."""
    return -2**63 <= seed < 2**64


def check_seed(owner: str, seed: object, *, none_ok: bool = False) -> None:
    """Raise ValueError naming ``owner`` unless ``seed`` is an int (not a bool) in torch's seed range, or None
    where ``none_ok``."""
    if none_ok and seed is None:
        return
    if not is_int(seed) or not in_torch_seed_range(seed):
        raise ValueError(f"{owner}: seed must be {'None or ' if none_ok else ''}an int in [-2**63, 2**64) (torch's "
                         f"seed range); got {seed!r}")
