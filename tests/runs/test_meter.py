import pytest

from cheaptune.errors import Infeasible
from cheaptune.runs.meter import CostMeter, billed_seconds, check_budget, per_instance_price


def test_billing_rounds_to_unit_and_minimum():
    assert billed_seconds(0) == 0
    assert billed_seconds(61, billing_unit_s=60) == 120
    assert billed_seconds(3600.0000001, billing_unit_s=3600) == 3600
    assert billed_seconds(10, billing_unit_s=1, min_billed_s=60) == 60
    m = CostMeter(price_per_hour=per_instance_price(1.5, 4), billing_unit_s=3600, prior_usd=2.0)
    assert m.billed(1) == pytest.approx(8.0)
    assert m.accrued(1800) == pytest.approx(5.0)
    assert m.projected(600, 0.25) == pytest.approx(8.0) and m.projected(10, 0) is None


def test_check_budget_refuses_naming_the_projection():
    check_budget(9.0, 10.0)
    check_budget(12.0, None)
    check_budget(12.0, 10.0, force=True)
    with pytest.raises(Infeasible, match=r"projected cost \$12.00 is above the budget \$10.00") as exc:
        check_budget(12.0, 10.0)
    assert exc.value.exit_code == 3
