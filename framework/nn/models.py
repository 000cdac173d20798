"""Node-classification models: stacks of one conv type with dropout, normalisation and activations.

Every model is ``dropout → conv → [norm → activation]`` repeated ``num_layers`` times, the bracket on
hidden layers only, as in Kipf & Welling (GCN) and Veličković et al. (GAT). :class:`GNN` does the stacking;
each model only says which convs to stack. :class:`GraphSAINT` ends in a linear classifier instead, so all of
its convs are hidden layers.

Shapes:
    x: (N, in_channels); graph: Graph of N nodes or edge_index (2, E); out: (N, out_channels) logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphfuse.checks import check_bools, is_int
from graphfuse.graph import Graph
from graphfuse.nn.gat_conv import GATConv
from graphfuse.nn.gcn_conv import GCNConv
from graphfuse.nn.inits import glorot_
from graphfuse.nn.inputs import (
    GraphLike,
    as_graph,
    check_features,
    check_positive_ints,
    check_rate,
)
from graphfuse.nn.sage_conv import SAGEConv
from graphfuse.nn.saint_conv import GraphSAINTConv

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "elu": F.elu,
    "gelu": F.gelu,
    "leaky_relu": F.leaky_relu,
}
NORMS: dict[str, Callable[[int], nn.Module]] = {"batch": nn.BatchNorm1d, "layer": nn.LayerNorm}
"""Normalisations after hidden convs: ``"layer"`` normalises each node's features (``nn.LayerNorm``), which is
PyG's ``LayerNorm(mode="node")``, not the ``mode="graph"`` that PyG's models pick for ``"layer_norm"``."""


def layer_widths(owner: str, in_channels: int, hidden_width: int, num_layers: int) -> list[int]:
    """Input width of each of ``num_layers`` convs: ``in_channels`` then ``hidden_width`` for the rest."""
    if not is_int(num_layers) or num_layers < 1:
        raise ValueError(f"{owner}: num_layers must be an int >= 1; got {num_layers!r}")
    return [in_channels] + [hidden_width] * (num_layers - 1)


class GNN(nn.Module):
    """The shared layer stack: ``dropout → conv → [norm → activation]`` per layer, bracket on hidden layers.

    Args:
        convs: the convolutions, first to last; each is called as ``conv(x, graph)``.
        hidden_width: output width of every hidden conv (the width the norms see).
        dropout: feature dropout before every conv.
        activation: one of :data:`ACTIVATIONS`.
        norm: None, or one of :data:`NORMS` (after every hidden conv).

    Shapes:
        x: (N, F); graph: Graph or edge_index (2, E); out: (N, output width of the last conv).
    """

    def __init__(
        self,
        convs: Sequence[nn.Module],
        hidden_width: int,
        *,
        dropout: float = 0.5,
        activation: str = "relu",
        norm: str | None = None,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        if not isinstance(activation, str) or activation not in ACTIVATIONS:
            raise ValueError(f"{name}: activation must be one of {list(ACTIVATIONS)}; got {activation!r}")
        if norm is not None and (not isinstance(norm, str) or norm not in NORMS):
            raise ValueError(f"{name}: norm must be None or one of {list(NORMS)}; got {norm!r}")
        check_rate(name, "dropout", dropout)
        check_positive_ints(name, hidden_width=hidden_width)
        if not convs:  # an empty stack failed at the first forward pass with an IndexError
            raise ValueError(f"{name}: convs must hold at least one convolution; got {convs!r}")
        self.convs = nn.ModuleList(convs)
        self.norms = None if norm is None else nn.ModuleList(NORMS[norm](hidden_width) for _ in convs[:-1])
        self.dropout = float(dropout)
        self.activation = activation
        self.act = ACTIVATIONS[activation]

    @property
    def in_channels(self) -> int:
        return self.convs[0].in_channels

    def reset_parameters(self) -> None:
        for module in [*self.convs, *(self.norms or [])]:
            module.reset_parameters()

    def _layer(self, i: int, x: Tensor, graph: Graph, *, hidden: bool) -> Tensor:
        """Layer ``i``: ``dropout → conv``, then ``[norm →] activation`` where ``hidden``."""
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.convs[i](x, graph)
        if hidden:
            if self.norms is not None:
                x = self.norms[i](x)
            x = self.act(x)
        return x

    def forward(self, x: Tensor, graph: GraphLike) -> Tensor:
        name = type(self).__name__
        check_features(name, x, self.in_channels, next(self.parameters()).dtype)
        graph = as_graph(name, x, graph, square=len(self.convs) > 1)  # each layer's output feeds the next
        last = len(self.convs) - 1
        for i in range(len(self.convs)):
            x = self._layer(i, x, graph, hidden=i < last)
        return x


class GCN(GNN):
    """Kipf & Welling's GCN (ICLR 2017): :class:`GCNConv` layers; ``conv_kwargs`` go to every conv.

    ``conv_class`` builds each layer as ``conv_class(in, out, **conv_kwargs)``; a subclass may swap it (the
    trainer's PyG reference twin does) and keep the layer stack.
    """

    conv_class: ClassVar[Callable[..., nn.Module]] = GCNConv

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        activation: str = "relu",
        norm: str | None = None,
        **conv_kwargs,
    ) -> None:
        name = type(self).__name__
        check_positive_ints(name, in_channels=in_channels, hidden_channels=hidden_channels, out_channels=out_channels)
        widths = layer_widths(name, in_channels, hidden_channels, num_layers)
        outs = [hidden_channels] * (num_layers - 1) + [out_channels]
        convs = [self.conv_class(i, o, **conv_kwargs) for i, o in zip(widths, outs)]
        super().__init__(convs, hidden_channels, dropout=dropout, activation=activation, norm=norm)


class GAT(GNN):
    """Veličković et al.'s GAT (ICLR 2018): hidden :class:`GATConv` layers concatenate ``heads`` heads of
    ``hidden_channels``; the last averages ``out_heads`` heads of ``out_channels``. ``attn_dropout`` is the
    attention-coefficient dropout; ``conv_kwargs`` go to every conv. ``conv_class`` builds each layer as
    ``conv_class(in, out, heads, concat=..., dropout=attn_dropout, **conv_kwargs)`` (swappable, as in
    :class:`GCN`)."""

    conv_class: ClassVar[Callable[..., nn.Module]] = GATConv

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        activation: str = "relu",
        norm: str | None = None,
        *,
        heads: int = 8,
        out_heads: int = 1,
        attn_dropout: float = 0.6,
        **conv_kwargs,
    ) -> None:
        name = type(self).__name__
        check_positive_ints(name, in_channels=in_channels, hidden_channels=hidden_channels, out_channels=out_channels,
                            heads=heads, out_heads=out_heads)
        check_rate(name, "attn_dropout", attn_dropout)
        if "concat" in conv_kwargs:  # it reached the last conv twice: "got multiple values for keyword argument"
            raise ValueError(f"{name}: concat is set per layer (the hidden layers concatenate their heads, the last "
                             "one averages its out_heads) and cannot be passed")
        widths = layer_widths(name, in_channels, hidden_channels * heads, num_layers)
        conv = self.conv_class
        convs = [conv(i, hidden_channels, heads, dropout=attn_dropout, **conv_kwargs) for i in widths[:-1]]
        convs.append(conv(widths[-1], out_channels, out_heads, concat=False, dropout=attn_dropout, **conv_kwargs))
        super().__init__(convs, hidden_channels * heads, dropout=dropout, activation=activation, norm=norm)


class GraphSAGE(GNN):
    """Hamilton et al.'s GraphSAGE (NeurIPS 2017): :class:`SAGEConv` layers with aggregator ``aggr``;
    ``conv_kwargs`` go to every conv."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        activation: str = "relu",
        norm: str | None = None,
        *,
        aggr: str = "mean",
        **conv_kwargs,
    ) -> None:
        name = type(self).__name__
        check_positive_ints(name, in_channels=in_channels, hidden_channels=hidden_channels, out_channels=out_channels)
        widths = layer_widths(name, in_channels, hidden_channels, num_layers)
        outs = [hidden_channels] * (num_layers - 1) + [out_channels]
        convs = [SAGEConv(i, o, aggr=aggr, **conv_kwargs) for i, o in zip(widths, outs)]
        super().__init__(convs, hidden_channels, dropout=dropout, activation=activation, norm=norm)


class GraphSAINT(GNN):
    """Zeng et al.'s GraphSAINT model (ICLR 2020), as in the paper's reference code.

    ``num_layers`` :class:`GraphSAINTConv` layers (each ``2 · hidden_channels`` wide), every one of them a
    hidden layer: ``dropout → conv → [norm →] activation``. Then the output layer: L2-normalise each row
    (``normalize``), dropout, and a linear classifier. With ``jk=True`` the classifier reads the concatenation
    of every layer's output (jumping knowledge, Xu et al., ICML 2018) instead of the last one. The graph's
    edge weights are the aggregation weights (see :class:`GraphSAINTConv`); ``conv_kwargs`` go to every conv.
    ``norm`` works as in the other models (before the activation, over the whole concatenation), where the
    reference code normalises each half of each node after the activation.

    Shapes:
        x: (N, in_channels); graph: Graph of N nodes or edge_index (2, E); out: (N, out_channels) logits.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        activation: str = "relu",
        norm: str | None = None,
        *,
        aggr: str = "mean",
        jk: bool = False,
        normalize: bool = True,
        **conv_kwargs,
    ) -> None:
        name = type(self).__name__
        check_positive_ints(name, in_channels=in_channels, hidden_channels=hidden_channels, out_channels=out_channels)
        check_bools(name, jk=jk, normalize=normalize)
        width = 2 * hidden_channels
        widths = layer_widths(name, in_channels, width, num_layers)
        convs = [GraphSAINTConv(i, hidden_channels, aggr=aggr, **conv_kwargs) for i in widths]
        super().__init__(convs, width, dropout=dropout, activation=activation, norm=norm)
        if norm is not None:  # the classifier is the output layer, so every conv (the last too) gets a norm
            self.norms = nn.ModuleList(NORMS[norm](width) for _ in convs)
        self.jk = jk
        self.normalize = normalize
        self.classifier = nn.Linear(width * num_layers if jk else width, out_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        glorot_(self.classifier.weight)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, x: Tensor, graph: GraphLike) -> Tensor:
        name = type(self).__name__
        check_features(name, x, self.in_channels, next(self.parameters()).dtype)
        graph = as_graph(name, x, graph, square=len(self.convs) > 1)  # each layer's output feeds the next
        outs = []
        for i in range(len(self.convs)):
            x = self._layer(i, x, graph, hidden=True)
            outs.append(x)
        x = torch.cat(outs, dim=-1) if self.jk else x
        if self.normalize:
            x = F.normalize(x, p=2.0, dim=-1)
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.classifier(x)


MODELS: dict[str, type[GNN]] = {"gcn": GCN, "gat": GAT, "sage": GraphSAGE, "saint": GraphSAINT}
