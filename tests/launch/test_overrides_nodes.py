"""An inline override (--region, --provider, --spot, --gpu) keeps a multi-node plan's nodes and network."""

from __future__ import annotations

from cheaptune.catalog.sources import load_offers
from cheaptune.launch.overrides import apply_overrides

from .conftest import make_plan, offer


def test_a_multi_node_plan_moved_elsewhere_stays_on_as_many_nodes_over_the_same_network():
    o = next(x for x in load_offers() if x.provider == "runpod" and not x.spot)
    planned = offer("runpod", o.gpu, o.price_per_hour, count=o.gpu_count, nodes=2)
    plan = make_plan(planned.model_copy(update={"network": "infiniband"}))
    moved = apply_overrides(plan, region=o.region)
    assert moved.offer.region == o.region and moved.alternatives == []
    assert (moved.offer.num_nodes, moved.offer.network) == (2, "infiniband")  # was 1 node, None
    one = apply_overrides(make_plan(offer("runpod", o.gpu, o.price_per_hour, count=o.gpu_count)), region=o.region)
    assert (one.offer.num_nodes, one.offer.network) == (1, None)
