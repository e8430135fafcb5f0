pytest_plugins = ["hami_core.testing.plugin"]
