"""The plugin's YAML cases, run by compactor's own runner: `python -m pytest` from anywhere."""

from compactor.testing import parametrize, run_case


@parametrize("cases")  # tests/cases/*.yaml, read from this file's folder
def test_case(case):
    run_case(case)
