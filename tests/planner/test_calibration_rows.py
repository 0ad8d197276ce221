"""Every published row the planner is judged on (calibration.csv and data/checks.csv) names a
model preset and an instance it knows, and gets a prediction; GPU rows in fp8 are served in fp8."""

from trnsim.planner import calibration, serving


def test_every_published_row_gets_a_prediction(roofline_costs):
    rows = calibration.rows() + calibration.rows("checks.csv")
    assert len({row.id for row in rows}) == len(rows)
    report = calibration.errors(rows)
    failed = [(item["id"], item["error"]) for item in report if not isinstance(item["error"], float)]
    assert failed == []
    assert all(item["predicted"] > 0 for item in report)


def test_the_gpu_check_rows_are_served_with_fp8_weights(roofline_costs, monkeypatch):
    seen = []
    original = serving.serve

    def spy(model, instance, plan, **options):
        seen.append((instance, plan.weights, plan.tp))
        return original(model, instance, plan, **options)
    monkeypatch.setattr(serving, "serve", spy)
    gpu_rows = [row for row in calibration.rows("checks.csv") if row.id.startswith("G")]
    assert len(gpu_rows) == 2
    assert all(calibration.predict(row) > 0 for row in gpu_rows)
    assert set(seen) == {("p5.48xlarge", "fp8", 2)}
