pytest_plugins = ["hami_core.testing.plugin"]
pytest_plugins += ["tests.skips"]  # CI's refusal of silent skips (HAMI_TEST_NO_SKIPS)
