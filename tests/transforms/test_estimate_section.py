"""The dry run's summary names each count for what it counts, as the run summary and the report
do: projects with sessions to do (each may get new memories), model requests."""

from __future__ import annotations

from memkiln.transforms.estimate import Estimate, estimate_section


def test_the_dry_run_names_projects_and_model_requests_as_the_report_does() -> None:
    estimate = Estimate(sessions_found=5, sessions_eligible=4, sessions_to_do=3, projects_to_do=2)
    estimate.add("extract", "openai", "m", requests=7, input_tokens=10, output_tokens=5, cost=None)
    rows = dict(estimate_section(estimate)[1])
    assert rows["projects with sessions to do"] == "2"
    assert rows["extract: openai m"] == "7 model requests"
    assert "projects to consolidate" not in rows
