"""Every hostile case (tests/helpers/hostile.py and its area modules): one line and the
documented status, nothing of the user's deleted or truncated, nothing left behind."""
import pytest

from tests.helpers.hostile import CLASSES, Runner, all_cases, run_case

CASES = all_cases()


def test_every_class_has_at_least_five_cases():
    per_class = {k: sum(c.klass == k for c in CASES) for k in CLASSES}
    assert min(per_class.values()) >= 5, per_class


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_case(case, tmp_path):
    outcome, problems = run_case(case, tmp_path, Runner())
    assert not problems, (f"{problems}\nstdout: {outcome.stdout[-800:]}\n"
                          f"stderr: {outcome.stderr[-1500:]}")
